-- A merchant's request rate (resilience/limits.py; Python twin: limits.rate_twin;
-- keyed by merchant in payments/limits.py). Runs after
-- prelude.lua (`now`). A fixed window of ARGV[3] seconds, shifted by ARGV[4]
-- seconds for this merchant (so every merchant's window does not restart at the same second),
-- allows ARGV[2] requests; a refused request is not counted. With ARGV[5] = 'refund', one
-- request counted in window ARGV[6] is given back, while that window lasts (a request another
-- limit refused after it was counted).
-- KEYS[1]: the merchant's counter, "<namespace>:merchant_rate:<merchant id>".
-- Returns {allowed or given back (1/0), remaining, seconds until the window ends, the window}.
now = tonumber(string.format('%.6f', now))
local quota = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local offset = tonumber(ARGV[4])
local index = math.floor((now - offset) / window)
local ends = (index + 1) * window + offset
local stored = redis.call('HMGET', KEYS[1], 'w', 'n')
local count = 0
if stored[1] == string.format('%d', index) then count = tonumber(stored[2]) end
local done = 0
if ARGV[5] == 'refund' then
  if ARGV[6] == string.format('%d', index) and count > 0 then
    done = 1
    count = count - 1
  end
elseif count < quota then
  done = 1
  count = count + 1
end
if done == 1 then
  redis.call('HSET', KEYS[1], 'w', string.format('%d', index), 'n', string.format('%d', count))
  redis.call('PEXPIRE', KEYS[1], math.ceil((ends - now) * 1000) + 1000)
end
return {string.format('%d', done), string.format('%d', quota - count),
        string.format('%.6f', ends - now), string.format('%d', index)}
