-- One attempt's admission, all or nothing, in one round trip (_attempt_state.py; Python twin:
-- _twins.admit). Runs after prelude.lua and the parts gate_read, budget, aimd and breaker
-- (functions of their own files: store.part_function). In order: the breaker takes a permit
-- (lua/breaker.lua acquire), the rate gate must be open (gate_read), a concurrency slot is
-- taken (aimd acquire), the retry budget takes its share (budget: a first attempt deposits,
-- a retry withdraws). The first step that refuses decides, and what earlier steps took is
-- given back in the same script (a half-open permit, a slot), so nobody sees it.
-- KEYS: [1] gate:<scope>, [2] budget:<acquirer>, [3] aimd:<scope>, [4] breaker:<acquirer>:<group>
-- (absent: the group has no breaker).
-- ARGV: [2] budget op (deposit | withdraw), [3] amount, [4] reserve, [5] slot seconds,
-- [6] slots; [7] initial limit, [8] max, [9] min, [10] ratio, [11] slot id, [12] lease
-- seconds (the slot's and the permit's); [13..20] the breaker's config (breaker.lua's
-- ARGV[3..10]), [21] permit id.
-- Returns {verdict (0 admitted, 1 breaker, 2 gate, 3 concurrency, 4 budget), gate seconds,
-- budget ok, budget balance, aimd's 6 numbers (acquire; zeros if not reached), breaker's 17
-- numbers (acquire; absent without a breaker)}.
local has_breaker = #KEYS >= 4
local b = {}
if has_breaker then
  b = breaker({KEYS[4]}, {'', 'acquire', ARGV[13], ARGV[14], ARGV[15], ARGV[16], ARGV[17],
                          ARGV[18], ARGV[19], ARGV[20], ARGV[21], ARGV[12]}, now)
end
local none = {'0', '0', '0', '0', '0', '0'}
local function answer(verdict, gate, ok, balance, a)
  local out = {verdict, gate, ok, balance}
  for i = 1, 6 do out[#out + 1] = a[i] end
  for i = 1, #b do out[#out + 1] = b[i] end
  return out
end
local function give_back_permit()
  if has_breaker and b[1] == 2 then
    breaker({KEYS[4]}, {'', 'record', ARGV[13], ARGV[14], ARGV[15], ARGV[16], ARGV[17],
                        ARGV[18], ARGV[19], ARGV[20], ARGV[21], 'i', b[3]}, now)
  end
end
if has_breaker and b[1] == 0 then return answer('1', '0', '0', '0', none) end
local g = gate_read({KEYS[1]}, {''}, now)
if tonumber(g[1]) > 0 then
  give_back_permit()
  return answer('2', g[1], '0', '0', none)
end
local a = aimd({KEYS[3]}, {'', 'acquire', ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11],
                           ARGV[12]}, now)
if a[1] ~= 1 then
  give_back_permit()
  return answer('3', g[1], '0', '0', a)
end
local m = budget({KEYS[2]}, {'', ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]}, now)
if m[1] ~= '1' then
  aimd({KEYS[3]}, {'', 'release', ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], 'ignore'}, now)
  give_back_permit()
  return answer('4', g[1], m[1], m[2], a)
end
return answer('0', g[1], m[1], m[2], a)
