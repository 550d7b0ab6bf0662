-- The retry budget (budget.py; Python twin: _twins.budget). Runs after prelude.lua.
-- ARGV: [2] op (deposit | withdraw | read), [3] amount, [4] reserve (thousandths of a
-- retry), [5] slot seconds, [6] slots. KEYS[1] budget:<acquirer> is a hash slot -> amount.
-- Returns {ok (1/0), balance}.
local op = ARGV[2]
local amount = tonumber(ARGV[3])
local reserve = tonumber(ARGV[4])
local slot_seconds = tonumber(ARGV[5])
local slots = tonumber(ARGV[6])
local slot = math.floor(now / slot_seconds)
local oldest = slot - slots + 1
local flat = redis.call('HGETALL', KEYS[1])
local sum = 0
for i = 1, #flat, 2 do
  local s = tonumber(flat[i])
  if s < oldest then
    redis.call('HDEL', KEYS[1], flat[i])
  else
    sum = sum + tonumber(flat[i + 1])
  end
end
local balance = reserve + sum
local ok = 1
if op == 'deposit' then
  redis.call('HINCRBY', KEYS[1], tostring(slot), amount)
  balance = balance + amount
elseif op == 'withdraw' then
  if balance >= amount then
    redis.call('HINCRBY', KEYS[1], tostring(slot), -amount)
    balance = balance - amount
  else
    ok = 0
  end
end
redis.call('PEXPIRE', KEYS[1], math.ceil(slot_seconds * slots * 1000) + 1000)
return {tostring(ok), tostring(balance)}
