-- One attempt's outcome, in one round trip (_attempt_state.py; Python twin: _twins.settle).
-- Runs after prelude.lua and the parts gate_close, gate_read, budget, aimd and breaker. In
-- order: the rate gate closes for the server's wait (gate_close, when one was given), the
-- concurrency slot goes back with the AIMD outcome (aimd release), the breaker records the
-- outcome (breaker record), and, when the caller may retry, the gate and the retry budget
-- are read (the retry's own withdrawal is part of its admission, lua/admit.lua).
-- KEYS: as lua/admit.lua.
-- ARGV: [2] gate wait seconds ('' to leave the gate), [3] '1' to read the gate and the
-- budget; [4] reserve, [5] slot seconds, [6] slots; [7] initial limit, [8] max, [9] min,
-- [10] ratio, [11] slot id, [12] aimd outcome (drop | success | ignore); [13..20] the
-- breaker's config, [21] permit id or '-', [22] breaker outcome (0-3 or 'i'), [23] generation.
-- Returns {gate seconds (-1: not read), budget ok, budget balance (-1: not read), aimd's 6
-- numbers (release), breaker's 17 numbers (record; absent without a breaker)}.
local gate = '-1'
if ARGV[2] ~= '' then gate = gate_close({KEYS[1]}, {'', ARGV[2]}, now)[1] end
local a = aimd({KEYS[3]}, {'', 'release', ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11],
                           ARGV[12]}, now)
local b = {}
if #KEYS >= 4 then
  b = breaker({KEYS[4]}, {'', 'record', ARGV[13], ARGV[14], ARGV[15], ARGV[16], ARGV[17],
                          ARGV[18], ARGV[19], ARGV[20], ARGV[21], ARGV[22], ARGV[23]}, now)
end
local m = {'0', '-1'}
if ARGV[3] == '1' then
  if gate == '-1' then gate = gate_read({KEYS[1]}, {''}, now)[1] end
  m = budget({KEYS[2]}, {'', 'read', '0', ARGV[4], ARGV[5], ARGV[6]}, now)
end
local out = {gate, m[1], m[2]}
for i = 1, 6 do out[#out + 1] = a[i] end
for i = 1, #b do out[#out + 1] = b[i] end
return out
