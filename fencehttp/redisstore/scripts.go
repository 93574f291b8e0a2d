package redisstore

import goredis "github.com/redis/go-redis/v9"

// The scripts share KEYS: the scope's token hash, the scope's lease, the
// key's claim and the key's result hash. The "#!lua" shebang makes the
// server refuse a writing script before its first command when it is over
// maxmemory, instead of failing at its first write.

// beginScript is Store.Begin: fencehttp.ScopeState.Admits against the
// stored token and floor (epochs.Token.CanClaim, and while a reset pins
// the scope, the stored token or an epoch above the floor only; refused:
// nothing changes), then, unless the scope's lease or the key's claim is
// another unit's (busy: nothing changes, the caller polls), the token's
// advance and either the recorded result (a duplicate) or the lease and
// the claim, both for ARGV[4] ms, and the scope's reset version, which
// the commit checks.
//
// ARGV: epoch, member, unit id, lease ms, group, topic, partition.
var beginScript = goredis.NewScript(`#!lua
local f = redis.call('HMGET', KEYS[1], 'e', 'm', 'f', 'v')
local e, m, id = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local floor = -1
if f[3] then floor = tonumber(f[3]) end
if f[2] ~= false and f[2] ~= '' then
  local he = tonumber(f[1])
  local same = e == he and m == f[2]
  if not same and (e <= he or (he <= floor and e <= floor)) then return {'fenced', f[1], f[2], tostring(floor)} end
end
local l = redis.call('GET', KEYS[2])
if l ~= false and l ~= id then return {'busy', 'scope'} end
local function store()
  redis.call('HSET', KEYS[1], 'e', ARGV[1], 'm', m, 'g', ARGV[5], 't', ARGV[6], 'p', ARGV[7])
end
local r = redis.call('HMGET', KEYS[4], 's', 'h', 'b')
if r[1] ~= false then
  store()
  return {'recorded', r[1], r[2], r[3]}
end
local c = redis.call('GET', KEYS[3])
if c ~= false and c ~= id then return {'busy', 'key'} end
store()
redis.call('SET', KEYS[2], id, 'PX', ARGV[4])
redis.call('SET', KEYS[3], id, 'PX', ARGV[4])
return {'ok', f[4] or '0'}
`)

// commitScript is Unit.Commit: the stored token must still be the unit's
// (epochs.Token.Holds) and the scope not reset since Begin (its reset
// version unchanged), the key not recorded and not claimed by another
// unit, every value the handler read unchanged, and every buffered command
// valid against the key types and values it will meet; then the commands,
// the result, and the release of the lease and the claim. Any refusal
// releases them too and writes nothing.
//
// ARGV: epoch, member, unit id, status, header (JSON), body, n reads,
// n commands, reset version, then the reads (kind g|h, key, field, present 0|1, value),
// then the commands (op, key, a1, a2).
var commitScript = goredis.NewScript(`#!lua
local id = ARGV[3]
local function release()
  if redis.call('GET', KEYS[3]) == id then redis.call('DEL', KEYS[3]) end
  if redis.call('GET', KEYS[2]) == id then redis.call('DEL', KEYS[2]) end
end
local f = redis.call('HMGET', KEYS[1], 'e', 'm', 'f', 'v')
if f[2] == false or tonumber(f[1]) ~= tonumber(ARGV[1]) or f[2] ~= ARGV[2] or (f[4] or '0') ~= ARGV[9] then
  release()
  return {'fenced', f[1] or '0', f[2] or '', f[3] or '-1'}
end
if redis.call('EXISTS', KEYS[4]) == 1 then release(); return {'recorded'} end
local c = redis.call('GET', KEYS[3])
if c ~= false and c ~= id then release(); return {'claimed'} end
local nr, nc = tonumber(ARGV[7]), tonumber(ARGV[8])
local i = 10
for j = 1, nr do
  local kind, k, field, present, want = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  i = i + 5
  local v
  if kind == 'g' then v = redis.pcall('GET', k) else v = redis.pcall('HGET', k, field) end
  if type(v) == 'table' or (v ~= false) ~= (present == '1') or (v ~= false and v ~= want) then
    release()
    return {'reads', j}
  end
end
-- Validate every command before the first write: a script is atomic but
-- not transactional, and a command failing half way (WRONGTYPE, not an
-- integer) would leave the earlier ones applied.
local ci = i
local types, strs, fields, cleared = {}, {}, {}, {}
local function typ(k)
  if types[k] == nil then types[k] = redis.call('TYPE', k).ok end
  return types[k]
end
local function isint(s) return type(s) == 'string' and #s <= 16 and string.match(s, '^-?%d+$') ~= nil end
local limit = 9007199254740992
local function bad(j, msg) release(); return {'invalid', j, msg} end
for j = 1, nc do
  local op, k, a1, a2 = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  i = i + 4
  if op == 'set' or op == 'del' then
    if op == 'set' then types[k], strs[k] = 'string', a1 else types[k], strs[k] = 'none', false end
    fields[k], cleared[k] = {}, true
  elseif op == 'incrby' then
    local t = typ(k)
    if t ~= 'none' and t ~= 'string' then return bad(j, 'INCRBY on a key holding a ' .. t) end
    local cur = '0'
    if t == 'string' then
      if strs[k] == nil then strs[k] = redis.call('GET', k) end
      cur = strs[k]
    end
    if not isint(cur) then return bad(j, 'INCRBY on a value that is not an integer') end
    local v = tonumber(cur) + tonumber(a1)
    if v >= limit or v <= -limit then return bad(j, 'INCRBY result outside +-2^53') end
    types[k], strs[k] = 'string', string.format('%.0f', v)
  elseif op == 'hset' or op == 'hdel' or op == 'hincrby' then
    local t = typ(k)
    if t ~= 'none' and t ~= 'hash' then return bad(j, string.upper(op) .. ' on a key holding a ' .. t) end
    if fields[k] == nil then fields[k] = {} end
    if op == 'hincrby' then
      local cur = fields[k][a1]
      if cur == nil then
        cur = false
        if t == 'hash' and not cleared[k] then cur = redis.call('HGET', k, a1) end
      end
      if cur == false then cur = '0' end
      if not isint(cur) then return bad(j, 'HINCRBY on a field that is not an integer') end
      local v = tonumber(cur) + tonumber(a2)
      if v >= limit or v <= -limit then return bad(j, 'HINCRBY result outside +-2^53') end
      fields[k][a1] = string.format('%.0f', v)
    elseif op == 'hset' then
      fields[k][a1] = a2
    else
      fields[k][a1] = false
    end
    if op ~= 'hdel' then types[k] = 'hash' end
  elseif op == 'sadd' or op == 'srem' then
    local t = typ(k)
    if t ~= 'none' and t ~= 'set' then return bad(j, string.upper(op) .. ' on a key holding a ' .. t) end
    if op == 'sadd' then types[k] = 'set' end
  elseif op == 'rpush' then
    local t = typ(k)
    if t ~= 'none' and t ~= 'list' then return bad(j, 'RPUSH on a key holding a ' .. t) end
    types[k] = 'list'
  else
    return bad(j, 'unknown command ' .. op)
  end
end
i = ci
for j = 1, nc do
  local op, k, a1, a2 = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  i = i + 4
  if op == 'set' then redis.call('SET', k, a1)
  elseif op == 'del' then redis.call('DEL', k)
  elseif op == 'incrby' then redis.call('INCRBY', k, a1)
  elseif op == 'hset' then redis.call('HSET', k, a1, a2)
  elseif op == 'hdel' then redis.call('HDEL', k, a1)
  elseif op == 'hincrby' then redis.call('HINCRBY', k, a1, a2)
  elseif op == 'sadd' then redis.call('SADD', k, a1)
  elseif op == 'srem' then redis.call('SREM', k, a1)
  elseif op == 'rpush' then redis.call('RPUSH', k, a1)
  end
end
redis.call('HSET', KEYS[4], 's', ARGV[4], 'h', ARGV[5], 'b', ARGV[6])
release()
return {'ok'}
`)

// abortScript is Unit.Abort: the release of the unit's lease and claim, if
// still its own. The token stays stored; nothing buffered was sent.
//
// ARGV: unit id.
var abortScript = goredis.NewScript(`#!lua
if redis.call('GET', KEYS[3]) == ARGV[1] then redis.call('DEL', KEYS[3]) end
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
return {'ok'}
`)

// resetScript is Store.ResetScope: a compare-and-set of the scope's
// stored token and floor on the expected ones, then the new token and
// floor, the reset version moved (a unit open across the reset is refused
// at its commit), and the audit entry appended to the scope's resets
// list. KEYS: the scope's token hash, its resets list.
//
// ARGV: expected epoch, member ("" for none), floor; new epoch, member,
// floor; group, topic, partition; the audit entry (JSON).
var resetScript = goredis.NewScript(`#!lua
local f = redis.call('HMGET', KEYS[1], 'e', 'm', 'f', 'v')
local m, e, fl = f[2] or '', f[1] or '0', f[3] or '-1'
if m == '' then e = '0' end
if m ~= ARGV[2] or (m ~= '' and tonumber(e) ~= tonumber(ARGV[1])) or tonumber(fl) ~= tonumber(ARGV[3]) then
  return {'conflict', e, m, fl}
end
redis.call('HSET', KEYS[1], 'e', ARGV[4], 'm', ARGV[5], 'f', ARGV[6], 'v', tostring(tonumber(f[4] or '0') + 1),
  'g', ARGV[7], 't', ARGV[8], 'p', ARGV[9])
local n = redis.call('RPUSH', KEYS[2], ARGV[10])
return {'ok', tostring(n)}
`)
