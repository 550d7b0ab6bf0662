-- A merchant's request rate (resilience/limits.py; Python twin: limits.rate_twin;
-- keyed by merchant in payments/limits.py). Runs after
-- prelude.lua (`now`). A fixed window of ARGV[3] seconds, shifted by ARGV[4]
-- seconds for this merchant (so every merchant's window does not restart at the same second),
-- allows ARGV[2] requests; a refused request is not counted.
-- KEYS[1]: the merchant's counter, "<namespace>:merchant_rate:<merchant id>".
-- Returns {allowed (1/0), remaining, seconds until the window ends}.
now = tonumber(string.format('%.6f', now))
local quota = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local offset = tonumber(ARGV[4])
local index = math.floor((now - offset) / window)
local ends = (index + 1) * window + offset
local stored = redis.call('HMGET', KEYS[1], 'w', 'n')
local count = 0
if stored[1] == string.format('%d', index) then count = tonumber(stored[2]) end
local allowed = 0
if count < quota then
  allowed = 1
  count = count + 1
  redis.call('HSET', KEYS[1], 'w', string.format('%d', index), 'n', string.format('%d', count))
  redis.call('PEXPIRE', KEYS[1], math.ceil((ends - now) * 1000) + 1000)
end
return {string.format('%d', allowed), string.format('%d', quota - count),
        string.format('%.6f', ends - now)}
