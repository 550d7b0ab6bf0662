-- The AIMD concurrency limiter (aimd.py; Python twin: _twins.aimd). Runs after prelude.lua.
-- ARGV: [2] op (acquire | release | read), [3] initial, [4] max, [5] min, [6] ratio,
-- [7] slot id, [8] lease seconds (acquire) or outcome (release: drop | success | ignore).
-- Hash KEYS[1] aimd:<scope>: lim, ls ("id=expiry=in_flight;..."), dec, inc.
-- Returns {granted or change (-1/0/1), limit, in flight, decreases, increases, in flight at
-- the slot's start}.
now = tonumber(string.format('%.6f', now))
local key = KEYS[1]
local op = ARGV[2]
local initial = tonumber(ARGV[3])
local maxl = tonumber(ARGV[4])
local minl = tonumber(ARGV[5])
local ratio = tonumber(ARGV[6])
local id = ARGV[7] or ''
local arg = ARGV[8] or ''
local h = {}
local flat = redis.call('HGETALL', key)
for i = 1, #flat, 2 do h[flat[i]] = flat[i + 1] end
local lim = tonumber(h['lim'] or initial)
if lim > maxl then lim = maxl end
if lim < minl then lim = minl end
local kept = {}
local mine = -1
for lid, exp, n in string.gmatch(h['ls'] or '', '([^=;]+)=([^=;]+)=([^;]+)') do
  if tonumber(exp) > now then
    if lid == id and op == 'release' then
      mine = tonumber(n)
    else
      kept[#kept + 1] = lid .. '=' .. exp .. '=' .. n
    end
  end
end
local result = 0
local dec = tonumber(h['dec'] or '0')
local inc = tonumber(h['inc'] or '0')
if op == 'acquire' then
  if #kept < lim then
    mine = #kept + 1
    kept[#kept + 1] = id .. '=' .. string.format('%.6f', now + tonumber(arg)) .. '=' .. mine
    result = 1
  end
elseif op == 'release' then
  if mine < 0 then mine = #kept + 1 end
  if arg == 'drop' then
    local new = math.max(minl, math.min(lim - 1, math.floor(lim * ratio)))
    if new < lim then result = -1; dec = dec + 1 end
    lim = new
  elseif arg == 'success' and mine * 2 >= lim then
    local new = math.min(maxl, lim + 1)
    if new > lim then result = 1; inc = inc + 1 end
    lim = new
  end
end
if op ~= 'read' then
  redis.call('HSET', key, 'lim', string.format('%d', lim), 'ls', table.concat(kept, ';'),
             'dec', string.format('%d', dec), 'inc', string.format('%d', inc))
end
return {result, lim, #kept, dec, inc, mine}  -- whole numbers: integer replies, exactly
