-- The rate gate, read (gate.py; Python twin: _twins.gate_read). Runs after prelude.lua.
-- KEYS[1] gate:<scope> holds "not before" on the store's clock. Returns {seconds until open}.
local not_before = tonumber(redis.call('GET', KEYS[1]) or '0')
local remaining = not_before - now
if remaining < 0 then remaining = 0 end
return {string.format('%.6f', remaining)}
