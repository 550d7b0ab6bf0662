-- The rate gate, closed for ARGV[2] more seconds (gate.py; Python twin: _twins.gate_close).
-- Runs after prelude.lua. A gate only moves later; the key expires 1 s after the wait.
-- Returns {seconds until open}.
local wait = tonumber(ARGV[2])
local not_before = tonumber(redis.call('GET', KEYS[1]) or '0')
local wanted = now + wait
if wanted > not_before then
  not_before = wanted
  redis.call('SET', KEYS[1], string.format('%.6f', not_before), 'PX', math.ceil(wait * 1000) + 1000)
end
local remaining = not_before - now
if remaining < 0 then remaining = 0 end
return {string.format('%.6f', remaining)}
