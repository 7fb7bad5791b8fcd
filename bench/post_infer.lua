-- wrk script: POST one real held-out digit to an Open Inference Protocol infer route.
-- Environment: BENCH_KEY (API key), BENCH_BODY_FILE (the JSON body), BENCH_PATH (the route).
local f = io.open(os.getenv("BENCH_BODY_FILE"), "r")
wrk.body = f:read("*a")
f:close()
wrk.method = "POST"
wrk.path = os.getenv("BENCH_PATH") or "/v2/models/digits/infer"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("BENCH_KEY")

-- Each wrk thread runs response() in a Lua state of its own, and done() in yet another: the
-- count is a global of each thread's state, summed through the thread objects setup() kept.
local threads = {}
function setup(thread)
  table.insert(threads, thread)
end
non200 = 0
response = function(status, headers, body)
  if status ~= 200 then non200 = non200 + 1 end
end
done = function(summary, latency, requests)
  local total = 0
  for _, thread in ipairs(threads) do total = total + (thread:get("non200") or 0) end
  io.write(string.format("non_200 %d\n", total))
end
