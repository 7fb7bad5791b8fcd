// Early-return helpers for absl::Status and absl::StatusOr<T>.
//
//   PILLAR_RETURN_IF_ERROR(file.Sync());
//   PILLAR_ASSIGN_OR_RETURN(auto config, ModelConfig::Parse(text));
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PILLAR_STATUS_CONCAT_INNER_(a, b) a##b
#define PILLAR_STATUS_CONCAT_(a, b) PILLAR_STATUS_CONCAT_INNER_(a, b)

#define PILLAR_RETURN_IF_ERROR(expr)                                    \
  do {                                                                  \
    if (::absl::Status _pillar_status = (expr); !_pillar_status.ok()) { \
      return _pillar_status;                                            \
    }                                                                   \
  } while (false)

#define PILLAR_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();      \
  lhs = std::move(*tmp)

#define PILLAR_ASSIGN_OR_RETURN(lhs, expr) \
  PILLAR_ASSIGN_OR_RETURN_IMPL_(PILLAR_STATUS_CONCAT_(_pillar_or_, __LINE__), lhs, expr)
