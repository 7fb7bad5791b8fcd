-- wrk script: POST one real held-out digit to an Open Inference Protocol infer route.
-- Environment: BENCH_KEY (API key), BENCH_BODY_FILE (the JSON body), BENCH_PATH (the route).
local f = io.open(os.getenv("BENCH_BODY_FILE"), "r")
wrk.body = f:read("*a")
f:close()
wrk.method = "POST"
wrk.path = os.getenv("BENCH_PATH") or "/v2/models/digits/infer"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("BENCH_KEY")

local non200 = 0
response = function(status, headers, body)
  if status ~= 200 then non200 = non200 + 1 end
end
done = function(summary, latency, requests)
  io.write(string.format("non_200 %d\n", non200))
end
