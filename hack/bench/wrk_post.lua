-- wrk script used by http_bench.py: POST a fixed body, report percentiles as JSON.
-- wrk keeps every request's latency in its histogram (1 us steps), so p99.9 is of all requests.
--
-- Environment (set by http_bench.py):
--   BENCH_BODY     path of the request body file (read once, sent on every request)
--   BENCH_CTYPE    Content-Type header
--   BENCH_HDRLEN   optional Inference-Header-Content-Length value (binary extension)
--   BENCH_PATH     request path (overrides the URL's path; keeps ':predict' intact)

local f = assert(io.open(os.getenv("BENCH_BODY"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = os.getenv("BENCH_CTYPE") or "application/json"
local hdrlen = os.getenv("BENCH_HDRLEN")
if hdrlen and hdrlen ~= "" then
  wrk.headers["Inference-Header-Content-Length"] = hdrlen
end
local path = os.getenv("BENCH_PATH")
if path and path ~= "" then
  wrk.path = path
end

function done(summary, latency, requests)
  local e = summary.errors
  -- latency values are in microseconds; errors.status counts HTTP status > 399
  io.write(string.format(
    'BENCH_RESULT {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"p50_us":%d,"p99_us":%d,"p999_us":%d,"max_us":%d,"mean_us":%.1f,' ..
    '"status_errors":%d,"connect":%d,"read":%d,"write":%d,"timeout":%d}\n',
    summary.requests, summary.duration, summary.bytes,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9), latency.max, latency.mean,
    e.status, e.connect, e.read, e.write, e.timeout))
end
