-- Prelude of every script (store.py prepends it): `now` is ARGV[1] when the caller gives a
-- clock reading, else the Redis server's TIME (seconds, float), one clock for the fleet.
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) + tonumber(t[2]) / 1000000
end
