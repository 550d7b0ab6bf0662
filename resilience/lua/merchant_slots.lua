-- A merchant's in-flight payments (resilience/limits.py; Python twin: limits.slots_twin;
-- keyed by merchant in payments/limits.py). Runs
-- after prelude.lua (`now`). A sorted set of leases, id -> expiry: an expired
-- lease (a process killed in the middle of a payment) frees its slot by itself.
-- KEYS[1]: "<namespace>:merchant_slots:<merchant id>". ARGV: [2] op (acquire | release),
-- [3] lease id, [4] limit (acquire), [5] lease seconds (acquire).
-- Returns {granted or released (1/0), leases held after the operation}.
now = tonumber(string.format('%.6f', now))
local key = KEYS[1]
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local held = redis.call('ZCARD', key)
if ARGV[2] == 'acquire' then
  local limit = tonumber(ARGV[4])
  local lease = tonumber(ARGV[5])
  if held >= limit then
    return {'0', string.format('%d', held)}
  end
  redis.call('ZADD', key, string.format('%.6f', now + lease), ARGV[3])
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', key, math.ceil((tonumber(last[2]) - now) * 1000) + 1000)
  return {'1', string.format('%d', held + 1)}
end
local removed = redis.call('ZREM', key, ARGV[3])
return {string.format('%d', removed), string.format('%d', held - removed)}
