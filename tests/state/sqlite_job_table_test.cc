// The jobs table of the state store: the store is the queue, so its claims, leases and ends are
// what keeps a job from being lost or run twice at once.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>

#include "state/state_store.h"
#include "testing/temp_dir.h"

namespace pillar::state {
namespace {

JobRecord Job(const std::string& id, const std::string& owner, int64_t created_us) {
  JobRecord j;
  j.id = id;
  j.owner = owner;
  j.principal = "{}";
  j.model = "digits";
  j.version = "1";
  j.request = std::string("{\"inputs\":[]}\0binary", 20);
  j.created_us = j.updated_us = created_us;
  return j;
}

JobQuota Cap(int64_t unfinished) { return {.max_unfinished = unfinished}; }

class JobTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = OpenSqliteStateStore((dir_.path() / "s.db").string());
    ASSERT_TRUE(opened.ok()) << opened.status();
    store_ = std::move(*opened);
  }
  testing::TempDir dir_;
  std::unique_ptr<StateStore> store_;
};

TEST_F(JobTableTest, KeepsTheRequestAndSaysThePositionOfAQueuedJob) {
  ASSERT_TRUE(store_->PutJob(Job("a", "key:1", 10), Cap(10)).ok());
  ASSERT_TRUE(store_->PutJob(Job("b", "key:1", 20), Cap(10)).ok());
  ASSERT_TRUE(store_->PutJob(Job("c", "key:2", 20), Cap(10)).ok());
  absl::StatusOr<JobRecord> c = store_->GetJob("c");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->request, Job("c", "", 0).request);  // binary-safe
  EXPECT_EQ(c->state, JobState::kQueued);
  EXPECT_EQ(c->queued_ahead, 2);  // a (earlier) and b (same time, smaller id)
  EXPECT_EQ(store_->GetJob("zz").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->PutJob(Job("a", "key:1", 30), Cap(10)).code(),
            absl::StatusCode::kAlreadyExists);
}

TEST_F(JobTableTest, AnOwnerMayHaveOnlySoManyUnfinishedJobs) {
  ASSERT_TRUE(store_->PutJob(Job("a", "key:1", 10), Cap(2)).ok());
  ASSERT_TRUE(store_->PutJob(Job("b", "key:1", 11), Cap(2)).ok());
  EXPECT_EQ(store_->PutJob(Job("c", "key:1", 12), Cap(2)).code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(store_->PutJob(Job("d", "key:2", 12), Cap(2)).ok());  // others are not counted
  // A finished job no longer counts.
  auto claimed = store_->ClaimJobs(100, 200, 1);
  ASSERT_TRUE(claimed.ok());
  ASSERT_EQ(claimed->size(), 1u);
  JobRecord end = (*claimed)[0];
  end.state = JobState::kDone;
  end.status = 200;
  ASSERT_TRUE(*store_->EndJobRun(end, 0));
  EXPECT_TRUE(store_->PutJob(Job("c", "key:1", 12), Cap(2)).ok());
}

TEST_F(JobTableTest, ClaimsAreExclusiveUntilTheirLeaseLapses) {
  ASSERT_TRUE(store_->PutJob(Job("a", "key:1", 10), Cap(10)).ok());
  auto first = store_->ClaimJobs(/*now=*/100, /*lease_until=*/200, 5);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->size(), 1u);
  EXPECT_EQ((*first)[0].attempts, 1);
  EXPECT_FALSE((*first)[0].interrupted);
  EXPECT_TRUE(store_->ClaimJobs(150, 250, 5)->empty());  // held
  ASSERT_TRUE(store_->RenewJobs({{"a", 1}}, 300).ok());
  EXPECT_TRUE(store_->ClaimJobs(250, 350, 5)->empty());  // renewed
  auto second = store_->ClaimJobs(301, 400, 5);          // lapsed: taken again, as interrupted
  ASSERT_EQ(second->size(), 1u);
  EXPECT_EQ((*second)[0].attempts, 2);
  EXPECT_TRUE((*second)[0].interrupted);
  // The first claim can no longer end the run, nor renew it; the second can.
  JobRecord stale = (*first)[0];
  stale.state = JobState::kDone;
  EXPECT_FALSE(*store_->EndJobRun(stale, 0));
  ASSERT_TRUE(store_->RenewJobs({{"a", 1}}, 10'000).ok());
  EXPECT_EQ(store_->GetJob("a")->lease_until_us, 400);
  JobRecord current = (*second)[0];
  current.state = JobState::kFailed;
  current.status = 503;
  current.result = "{\"error\":\"x\"}";
  current.headers = "Retry-After: 2\n";
  current.expires_us = 1000;
  EXPECT_TRUE(*store_->EndJobRun(current, 0));
  absl::StatusOr<JobRecord> ended = store_->GetJob("a");
  EXPECT_EQ(ended->state, JobState::kFailed);
  EXPECT_EQ(ended->status, 503);
  EXPECT_EQ(ended->result, "{\"error\":\"x\"}");
  EXPECT_EQ(ended->headers, "Retry-After: 2\n");
  EXPECT_TRUE(store_->ClaimJobs(10'000, 20'000, 5)->empty());  // finished jobs are not claimed
}

TEST_F(JobTableTest, AGivenUpClaimIsTakenAtOnceAndABackoffIsWaitedOut) {
  ASSERT_TRUE(store_->PutJob(Job("a", "key:1", 10), Cap(10)).ok());
  ASSERT_TRUE(store_->PutJob(Job("b", "key:1", 11), Cap(10)).ok());
  auto claimed = store_->ClaimJobs(100, 10'000, 5);
  ASSERT_EQ(claimed->size(), 2u);
  EXPECT_EQ((*claimed)[0].id, "a");                    // oldest first
  ASSERT_TRUE(store_->RenewJobs({{"a", 1}}, 0).ok());  // given up (a stopping instance)
  JobRecord requeued = (*claimed)[1];
  requeued.state = JobState::kQueued;
  requeued.not_before_us = 500;
  ASSERT_TRUE(*store_->EndJobRun(requeued, 0));
  auto again = store_->ClaimJobs(200, 10'000, 5);
  ASSERT_EQ(again->size(), 1u);
  EXPECT_EQ((*again)[0].id, "a");
  EXPECT_TRUE((*again)[0].interrupted);
  auto later = store_->ClaimJobs(500, 10'000, 5);
  ASSERT_EQ(later->size(), 1u);
  EXPECT_EQ((*later)[0].id, "b");
  EXPECT_FALSE((*later)[0].interrupted);
  EXPECT_EQ((*later)[0].attempts, 2);
}

TEST_F(JobTableTest, ExpiredFinishedJobsAreDeletedAndCountsFollow) {
  ASSERT_TRUE(store_->PutJob(Job("a", "key:1", 10), Cap(10)).ok());
  ASSERT_TRUE(store_->PutJob(Job("b", "key:1", 11), Cap(10)).ok());
  auto claimed = store_->ClaimJobs(100, 10'000, 1);
  JobRecord end = (*claimed)[0];
  end.state = JobState::kDone;
  end.expires_us = 1'000;
  ASSERT_TRUE(*store_->EndJobRun(end, 0));
  auto counts = store_->CountJobs();
  ASSERT_TRUE(counts.ok());
  ASSERT_EQ(counts->size(), 2u);
  EXPECT_EQ(*store_->DeleteExpiredJobs(999), 0);
  EXPECT_EQ(*store_->DeleteExpiredJobs(1'000), 1);  // queued jobs are never expired this way
  EXPECT_EQ(store_->GetJob("a").status().code(), absl::StatusCode::kNotFound);
  counts = store_->CountJobs();
  ASSERT_EQ(counts->size(), 1u);
  EXPECT_EQ((*counts)[0].state, JobState::kQueued);
  EXPECT_EQ((*counts)[0].count, 1);
}

TEST_F(JobTableTest, AnOwnedJobIsFoundForItsOwnersAloneAndAnotherIsLikeNone) {
  ASSERT_TRUE(store_->PutJob(Job("a", "key:1", 10), Cap(10)).ok());
  EXPECT_EQ(store_->GetOwnedJob("a", {"key:1"})->owner, "key:1");
  EXPECT_EQ(store_->GetOwnedJob("a", {"key:2", "key:1"})->owner, "key:1");  // a successor's
  const absl::Status theirs = store_->GetOwnedJob("a", {"key:2"}).status();
  const absl::Status none = store_->GetOwnedJob("b", {"key:2"}).status();
  EXPECT_TRUE(absl::IsNotFound(theirs)) << theirs;
  EXPECT_TRUE(absl::IsNotFound(none)) << none;
  EXPECT_EQ(theirs.message(), "no job a");
  EXPECT_TRUE(absl::IsNotFound(store_->GetOwnedJob("a", {}).status()));
  // Its result's size, read without the result: none yet, then what its run ended with.
  EXPECT_EQ(*store_->OwnedJobResultBytes("a", {"key:1"}), 0);
  EXPECT_TRUE(absl::IsNotFound(store_->OwnedJobResultBytes("a", {"key:2"}).status()));
  absl::StatusOr<std::vector<JobRecord>> claimed = store_->ClaimJobs(20, 1'000, 1);
  ASSERT_EQ(claimed->size(), 1u);
  JobRecord done = (*claimed)[0];
  done.state = JobState::kDone;
  done.status = 200;
  done.result = std::string(5'000, 'r');
  ASSERT_TRUE(store_->EndJobRun(done, int64_t{1} << 30).ok());
  EXPECT_EQ(*store_->OwnedJobResultBytes("a", {"key:1"}), 5'000);
}

TEST_F(JobTableTest, JobsSurviveReopening) {
  ASSERT_TRUE(store_->PutJob(Job("a", "key:1", 10), Cap(10)).ok());
  store_.reset();
  auto reopened = OpenSqliteStateStore((dir_.path() / "s.db").string());
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ((*reopened)->GetJob("a")->owner, "key:1");
}

TEST_F(JobTableTest, KeptClaimQueriesHoldNothingBetweenPolls) {
  // The claim's queries are prepared once and kept: between claims they must hold no read of the
  // file (another process could not checkpoint its WAL, nor would a writer see its changes
  // claimed), and closing the store must close the file (sqlite3_close refused a connection
  // with statements left, and leaked it).
  ASSERT_TRUE(store_->PutJob(Job("a", "key:1", 10), Cap(10)).ok());
  ASSERT_EQ(store_->ClaimJobs(20, 1'000, 4)->size(), 1u);
  ASSERT_TRUE(store_->ClaimJobs(30, 1'000, 4)->empty());
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open((dir_.path() / "s.db").string().c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "SELECT COUNT(*) FROM jobs", nullptr, nullptr, nullptr), SQLITE_OK);
  int log = -1, checkpointed = -1;
  EXPECT_EQ(
      sqlite3_wal_checkpoint_v2(other, nullptr, SQLITE_CHECKPOINT_TRUNCATE, &log, &checkpointed),
      SQLITE_OK)
      << sqlite3_errmsg(other);
  EXPECT_EQ(log, 0);  // truncated: no reader held a snapshot
  // A job another connection adds is claimed by the kept query.
  ASSERT_EQ(
      sqlite3_exec(other,
                   "INSERT INTO jobs (id, owner, principal, model, version, request, "
                   "priority, idempotent, state, created_us, updated_us, not_before_us, "
                   "lease_until_us, attempts, expires_us, status, content_type, headers, result) "
                   "SELECT 'b', owner, principal, model, version, request, priority, "
                   "idempotent, 'queued', 40, 40, 0, 0, 0, expires_us, 0, '', '', '' FROM jobs "
                   "WHERE id = 'a'",
                   nullptr, nullptr, nullptr),
      SQLITE_OK)
      << sqlite3_errmsg(other);
  absl::StatusOr<std::vector<JobRecord>> claimed = store_->ClaimJobs(50, 1'000, 4);
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  ASSERT_EQ(claimed->size(), 1u);
  EXPECT_EQ((*claimed)[0].id, "b");
  sqlite3_close(other);
  store_.reset();
  // Closed: no descriptor of the process still names the file.
  int open = 0;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::filesystem::path target = std::filesystem::read_symlink(fd.path(), ec);
    if (!ec && target.filename() == "s.db") ++open;
  }
  EXPECT_EQ(open, 0);
}

TEST_F(JobTableTest, AnOwnerMayKeepOnlySoManyJobsAndBytesAndAFinishedJobDropsItsRequest) {
  const JobQuota quota{.max_unfinished = 100, .max_jobs = 3, .max_bytes = 50};
  JobRecord big = Job("big", "key:1", 10);
  big.request = std::string(60, 'x');
  EXPECT_EQ(store_->PutJob(big, quota).code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(store_->PutJob(Job("a", "key:1", 10), quota).ok());  // 20 bytes
  ASSERT_TRUE(store_->PutJob(Job("b", "key:1", 11), quota).ok());  // 40
  EXPECT_EQ(store_->PutJob(Job("c", "key:1", 12), quota).code(),   // 60: over
            absl::StatusCode::kResourceExhausted);
  auto claimed = store_->ClaimJobs(100, 10'000, 1);
  JobRecord end = (*claimed)[0];
  end.state = JobState::kDone;
  end.result = "ok";
  end.expires_us = 1'000'000;
  ASSERT_TRUE(*store_->EndJobRun(end, 0));
  EXPECT_TRUE(store_->GetJob("a")->request.empty());  // the request is not kept once finished
  ASSERT_TRUE(store_->PutJob(Job("c", "key:1", 12), quota).ok());  // 2 + 20 + 20
  EXPECT_EQ(store_->PutJob(Job("d", "key:1", 13), quota).code(),   // a 4th job, finished or not
            absl::StatusCode::kResourceExhausted);
  // The stored principal counts too (found by review helper-69: a client certificate's chain
  // kept with each job was not counted).
  JobRecord heavy = Job("e", "key:2", 14);
  heavy.request = "x";
  heavy.principal = std::string(60, 'p');
  EXPECT_EQ(store_->PutJob(heavy, quota).code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(JobTableTest, AHeldBackRunIsNotCounted) {
  ASSERT_TRUE(store_->PutJob(Job("a", "key:1", 10), Cap(10)).ok());
  JobRecord held = (*store_->ClaimJobs(100, 10'000, 1))[0];
  ASSERT_EQ(held.attempts, 1);
  held.state = JobState::kQueued;
  held.refund_attempt = true;
  ASSERT_TRUE(*store_->EndJobRun(held, 0));
  EXPECT_EQ((*store_->ClaimJobs(200, 10'000, 1))[0].attempts, 1);
}

TEST_F(JobTableTest, ClaimsShareWorkersAmongOwners) {
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(store_->PutJob(Job("a" + std::to_string(i), "key:busy", 10 + i), Cap(10)).ok());
  }
  ASSERT_TRUE(store_->PutJob(Job("b0", "key:other", 100), Cap(10)).ok());
  auto first = store_->ClaimJobs(1'000, 10'000, 2);
  ASSERT_EQ(first->size(), 2u);
  EXPECT_EQ((*first)[0].id, "a0");
  EXPECT_EQ((*first)[1].id, "b0");                  // not a1: its owner runs nothing yet
  auto next = store_->ClaimJobs(1'000, 10'000, 2);  // only the busy owner waits: it gets both
  ASSERT_EQ(next->size(), 2u);
  EXPECT_EQ((*next)[0].id, "a1");
  EXPECT_EQ((*next)[1].id, "a2");
}

// Found by the second attacker review: with 64 or more jobs of one owner waiting, another
// owner's job was never among the candidates.
TEST_F(JobTableTest, AnotherOwnersJobIsClaimedWhateverTheBacklogAheadOfIt) {
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(store_
                    ->PutJob(Job("a" + std::to_string(1000 + i), "key:busy", 10 + i),
                             {.max_unfinished = 1000})
                    .ok());
  }
  ASSERT_TRUE(store_->PutJob(Job("victim", "key:other", 5000), Cap(10)).ok());
  ASSERT_EQ(store_->ClaimJobs(10'000, 20'000, 1)->size(), 1u);  // busy's oldest: it runs nothing
  auto next = store_->ClaimJobs(10'000, 20'000, 1);
  ASSERT_EQ(next->size(), 1u);
  EXPECT_EQ((*next)[0].id, "victim");
}

// Found by the second attacker review: results did not count against what an owner may keep.
TEST_F(JobTableTest, AResultThatWouldPassTheOwnersBytesIsKeptAsAnError) {
  ASSERT_TRUE(store_->PutJob(Job("a", "key:1", 10), Cap(10)).ok());
  ASSERT_TRUE(store_->PutJob(Job("b", "key:1", 11), Cap(10)).ok());  // 20 bytes of request
  auto claimed = store_->ClaimJobs(100, 10'000, 1);
  JobRecord end = (*claimed)[0];
  end.state = JobState::kDone;
  end.status = 200;
  end.result = std::string(100, 'r');
  ASSERT_TRUE(*store_->EndJobRun(end, 100));  // 100 + b's 20 > 100
  absl::StatusOr<JobRecord> a = store_->GetJob("a");
  EXPECT_EQ(a->state, JobState::kFailed);
  EXPECT_EQ(a->status, 507);
  EXPECT_NE(a->result.find("would pass the 100 bytes"), std::string::npos) << a->result;
  // Within the budget, the result is kept as it is.
  JobRecord b = (*store_->ClaimJobs(200, 10'000, 1))[0];
  b.state = JobState::kDone;
  b.status = 200;
  b.result = std::string(50, 'r');
  ASSERT_TRUE(*store_->EndJobRun(b, 1000));
  EXPECT_EQ(store_->GetJob("b")->result, std::string(50, 'r'));
}

}  // namespace
}  // namespace pillar::state
