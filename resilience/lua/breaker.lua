-- The circuit breaker (breaker.py; Python twin: _twins.breaker). Runs after prelude.lua.
-- ARGV: [1] now, [2] op, [3] window type, [4] window size, [5] minimum calls, [6] failure rate
-- threshold, [7] slow rate threshold (0: off), [8] open duration, [9] half-open permits,
-- [10] max half-open duration (0: none), [11..13] the op's arguments:
--   acquire  permit id, lease seconds          peek  -                  read  -
--   record   permit id or '-', outcome (0-3 or 'i'), generation
--   override 3 forced_open | 4 disabled | 5 metrics_only              reset -
-- Hash fields: st (0 closed, 1 open, 2 half-open), gen, since, until, w (count window: one
-- character per result, 0 success, 1 failure, 2 slow success, 3 slow failure), tw (time
-- window: "second:calls:failures:slow;..."), ls (leases "id=expiry;..."), hc/hf/hs (half-open
-- results, failures, slow), ov (0, or an override 3/4/5), ref (refused), ct/ft/lt (recorded
-- results, failures, late results). Times are kept in microseconds ("%.6f"), and `now` is
-- rounded to them first, so a boundary such as "opened + open_duration" compares exactly.
-- Returns the 17 numbers indexed in breaker.py (_RESULT ... _NOW): the whole ones as Lua numbers
-- (integer replies), retry, since, until and now as "%.6f" text.
now = tonumber(string.format('%.6f', now))
local key = KEYS[1]
local op = ARGV[2]
local wtype = ARGV[3]
local wsize = tonumber(ARGV[4])
local minc = tonumber(ARGV[5])
local fthr = tonumber(ARGV[6])
local sthr = tonumber(ARGV[7])
local opend = tonumber(ARGV[8])
local permits = tonumber(ARGV[9])
local maxho = tonumber(ARGV[10])
local a1 = ARGV[11] or ''
local a2 = ARGV[12] or ''
local a3 = ARGV[13] or ''
local HALF_OPEN_WAIT = 1.0

local h = {}
local flat = redis.call('HGETALL', key)
for i = 1, #flat, 2 do h[flat[i]] = flat[i + 1] end
local dirty = false
local changed = {}

local function num(f, d)
  local v = h[f]
  if v == nil or v == '' then return d end
  return tonumber(v)
end
local function put(f, v) h[f] = v; changed[f] = true; dirty = true end
local function fmt(x) return string.format('%.6f', x) end
local function int(x) return string.format('%d', x) end

local st = num('st', 0)
local gen = num('gen', 0)
local ov = num('ov', 0)
local since = num('since', now)
local from_s, to_s = -1, -1

local function reported()
  if ov ~= 0 then return ov end
  return st
end

local function window()
  if wtype == 'count' then
    local w = h['w'] or ''
    if #w > wsize then w = string.sub(w, -wsize) end
    local _, f = string.gsub(w, '[13]', '')
    local _, s = string.gsub(w, '[23]', '')
    return #w, f, s, w
  end
  local oldest = math.floor(now) - wsize + 1
  local kept = {}
  local c, f, s = 0, 0, 0
  for sec, ec, ef, es in string.gmatch(h['tw'] or '', '(%-?%d+):(%d+):(%d+):(%d+)') do
    if tonumber(sec) >= oldest then
      kept[#kept + 1] = sec .. ':' .. ec .. ':' .. ef .. ':' .. es
      c = c + tonumber(ec)
      f = f + tonumber(ef)
      s = s + tonumber(es)
    end
  end
  return c, f, s, table.concat(kept, ';')
end

local function add(o)
  local fail = 0
  local slow = 0
  if o == '1' or o == '3' then fail = 1 end
  if o == '2' or o == '3' then slow = 1 end
  if wtype == 'count' then
    local w = (h['w'] or '') .. o
    if #w > wsize then w = string.sub(w, -wsize) end
    put('w', w)
    return
  end
  local sec = int(math.floor(now))
  local _, _, _, pruned = window()
  local kept = {}
  local found = false
  for esec, ec, ef, es in string.gmatch(pruned, '(%-?%d+):(%d+):(%d+):(%d+)') do
    if esec == sec then
      found = true
      ec = int(tonumber(ec) + 1)
      ef = int(tonumber(ef) + fail)
      es = int(tonumber(es) + slow)
    end
    kept[#kept + 1] = esec .. ':' .. ec .. ':' .. ef .. ':' .. es
  end
  if not found then
    kept[#kept + 1] = sec .. ':1:' .. int(fail) .. ':' .. int(slow)
  end
  put('tw', table.concat(kept, ';'))
end

local function needed()
  if wtype == 'count' and wsize < minc then return wsize end
  return minc
end

local function trips(c, f, s, least)
  if c < least then return false end
  if f * 100 >= fthr * c then return true end
  if sthr > 0 and s * 100 >= sthr * c then return true end
  return false
end

local function leases(write)
  local ls = h['ls'] or ''
  local kept = {}
  for id, exp in string.gmatch(ls, '([^=;]+)=([^;]+)') do
    if tonumber(exp) > now then kept[#kept + 1] = id .. '=' .. exp end
  end
  local s = table.concat(kept, ';')
  if write and s ~= ls then put('ls', s) end
  return #kept, s
end

local function take_lease(id)
  local _, s = leases(true)
  local kept = {}
  local found = false
  for lid, exp in string.gmatch(s, '([^=;]+)=([^;]+)') do
    if lid == id then found = true else kept[#kept + 1] = lid .. '=' .. exp end
  end
  if found then put('ls', table.concat(kept, ';')) end
  return found
end

local function clear()
  put('w', ''); put('tw', ''); put('ls', '')
  put('hc', '0'); put('hf', '0'); put('hs', '0')
end

local function go(to)
  if from_s < 0 then from_s = reported() end
  st = to
  gen = gen + 1
  since = now
  put('st', int(st)); put('gen', int(gen)); put('since', fmt(now))
  clear()
  if to == 1 then put('until', fmt(now + opend)) end
  to_s = reported()
end

local function half_open_expired()
  return st == 2 and ov == 0 and maxho > 0 and now - since >= maxho
end

local result = 0
local retry = 0
local dc, df, ds = -1, -1, -1

if op == 'acquire' then
  if ov == 4 or ov == 5 then
    result = 1
  elseif ov == 3 then
    retry = opend
  else
    if half_open_expired() then go(1) end
    if st == 1 and now >= num('until', 0) then go(2) end
    if st == 0 then
      result = 1
    elseif st == 1 then
      retry = num('until', 0) - now
    else
      local n, s = leases(true)
      if n + num('hc', 0) < permits then
        local lease = a1 .. '=' .. fmt(now + tonumber(a2))
        if s == '' then put('ls', lease) else put('ls', s .. ';' .. lease) end
        result = 2
      else
        retry = HALF_OPEN_WAIT
      end
    end
  end
  if result == 0 then put('ref', int(num('ref', 0) + 1)) end
elseif op == 'peek' then
  if ov == 3 then
    retry = opend
  elseif ov == 4 or ov == 5 or st == 0 then
    result = 1
  elseif half_open_expired() then
    retry = opend
  elseif st == 1 then
    local u = num('until', 0)
    if now >= u then result = 1 else retry = u - now end
  else
    local n = leases(false)
    if n + num('hc', 0) < permits then result = 1 else retry = HALF_OPEN_WAIT end
  end
elseif op == 'record' then
  local o = a2
  local fail = 0
  local slow = 0
  if o == '1' or o == '3' then fail = 1 end
  if o == '2' or o == '3' then slow = 1 end
  if ov == 4 then
    result = 0
  elseif o == 'i' then
    if tonumber(a3) == gen and st == 2 and ov == 0 and a1 ~= '-' then take_lease(a1) end
    result = 0
  else
    put('ct', int(num('ct', 0) + 1))
    if fail == 1 then put('ft', int(num('ft', 0) + 1)) end
    if tonumber(a3) ~= gen then
      put('lt', int(num('lt', 0) + 1))
      result = 2
    elseif ov == 5 or (ov == 0 and st == 0) then
      add(o)
      local c, f, s = window()
      dc, df, ds = c, f, s
      if ov == 0 and trips(c, f, s, needed()) then go(1) end
      result = 1
    elseif ov == 0 and st == 2 and a1 ~= '-' and take_lease(a1) then
      local hc = num('hc', 0) + 1
      local hf = num('hf', 0) + fail
      local hs = num('hs', 0) + slow
      put('hc', int(hc)); put('hf', int(hf)); put('hs', int(hs))
      dc, df, ds = hc, hf, hs
      if hc >= permits then
        if trips(hc, hf, hs, permits) then go(1) else go(0) end
      end
      result = 1
    else
      put('lt', int(num('lt', 0) + 1))
      result = 2
    end
  end
elseif op == 'override' then
  from_s = reported()
  ov = tonumber(a1)
  st = 0
  gen = gen + 1
  since = now
  put('ov', int(ov)); put('st', '0'); put('gen', int(gen)); put('since', fmt(now))
  clear()
  to_s = reported()
elseif op == 'reset' then
  from_s = reported()
  ov = 0
  st = 0
  gen = gen + 1
  since = now
  put('ov', '0'); put('st', '0'); put('gen', int(gen)); put('since', fmt(now))
  clear()
  to_s = 0
end

if op ~= 'acquire' and op ~= 'peek' then
  if ov == 3 then
    retry = opend
  elseif ov == 0 and st == 1 then
    retry = num('until', 0) - now
    if retry < 0 then retry = 0 end
  end
end

if dirty then  -- the fields this operation wrote, only
  local out = {}
  for f in pairs(changed) do
    out[#out + 1] = f
    out[#out + 1] = h[f]
  end
  redis.call('HSET', key, unpack(out))
end

local c, f, s
if dc >= 0 then
  c, f, s = dc, df, ds
elseif st == 2 and ov == 0 then
  c, f, s = num('hc', 0), num('hf', 0), num('hs', 0)
else
  c, f, s = window()
end
local in_use = leases(false)
-- Whole numbers as Lua numbers (Redis answers them as integers, exactly), the times as text
-- (Redis would truncate a fraction): no string.format for the 13 counters.
return {result, reported(), gen, fmt(retry), from_s, to_s,
        c, f, s, num('ref', 0), in_use,
        num('ct', 0), num('ft', 0), num('lt', 0),
        fmt(since), fmt(num('until', 0)), fmt(now)}
