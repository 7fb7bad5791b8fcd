-- wrk script: GET a route with an API key (pillar's cheapest authenticated route is GET /v2).
wrk.method = "GET"
wrk.path = os.getenv("BENCH_PATH") or "/v2"
local key = os.getenv("BENCH_KEY")
if key and key ~= "" then wrk.headers["Authorization"] = "Bearer " .. key end
