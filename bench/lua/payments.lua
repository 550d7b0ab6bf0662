-- wrk script: POST /payments with an Idempotency-Key per request (bench/common.py runs it).
--
--   wrk -t2 -c16 -d15s -s bench/lua/payments.lua http://127.0.0.1:8000/payments \
--       -- <api key> <fresh|replay> <key prefix> <replay pool size> [payment_method token]
--
-- fresh:  every request carries a new key, <prefix>-<thread>-<n>: every request is a payment.
-- replay: keys <prefix>-0 .. <prefix>-<pool-1>, already completed (the harness created them
--         with the same body), cycled through from a different offset in each thread: every
--         request is a replay.
-- done() prints one line, "BENCH_JSON {...}", with the counts per HTTP status (summed over
-- wrk's threads), socket errors and latency percentiles in microseconds.

local threads = {}
local next_id = 0

function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

function init(args)
  api_key = args[1]
  mode = args[2] or "fresh"
  prefix = args[3] or "k"
  pool = tonumber(args[4] or "0")
  token = args[5] or "tok_visa"
  n = 0
  statuses = {}
  wrk.method = "POST"
  wrk.body = '{"amount": 1999, "currency": "EUR", "payment_method": "' .. token .. '"}'
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Authorization"] = "Bearer " .. api_key
end

function request()
  local key
  if mode == "replay" then
    key = prefix .. "-" .. ((id * 7919 + n) % pool)
  else
    key = prefix .. "-" .. id .. "-" .. n
  end
  n = n + 1
  wrk.headers["Idempotency-Key"] = key
  return wrk.format()
end

function response(status, headers, body)
  local name = tostring(status)
  statuses[name] = (statuses[name] or 0) + 1
end

function done(summary, latency, requests)
  local total = {}
  for _, thread in ipairs(threads) do
    local counts = thread:get("statuses")
    for name, count in pairs(counts) do
      total[name] = (total[name] or 0) + count
    end
  end
  local parts = {}
  for name, count in pairs(total) do
    table.insert(parts, string.format('"%s": %d', name, count))
  end
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests": %d, "duration_us": %d, "statuses": {%s}, ' ..
    '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}, ' ..
    '"p50_us": %d, "p90_us": %d, "p99_us": %d, "max_us": %d, "mean_us": %d}\n',
    summary.requests, summary.duration, table.concat(parts, ", "),
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean))
end
