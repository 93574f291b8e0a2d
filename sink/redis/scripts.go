package redis

import goredis "github.com/redis/go-redis/v9"

// The sink's Lua scripts. Each is one atomic unit on the server: Redis runs
// a script to its end with no other command in between, and the "#!lua"
// shebang makes the server refuse a writing script before its first
// command when it is over maxmemory (instead of failing at its first
// write, after the fence check). Numbers cross the script boundary as
// strings formatted by num(): Lua's own tostring prints 15 digits and
// would round offsets.

// luaPrelude is shared by the scripts.
const luaPrelude = `#!lua
local function num(x) return string.format('%.0f', x) end
local function now_ms()
  local t = redis.call('TIME')
  return num(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
end
local function history(key, seqkey, cap, kind, e, m, n, reason, topic, detail, sp, proven)
  local seq = redis.call('INCR', seqkey)
  redis.call('RPUSH', key, cjson.encode({s = num(seq), k = kind, e = num(e), m = m, n = num(n),
    r = reason, t = topic, d = detail, at = now_ms(), sp = sp, pv = proven}))
  if cap > 0 then redis.call('LTRIM', key, -cap, -1) end
  return seq
end
`

// claimScript is Claim: sink.Fence.CheckClaim (epochs.Token.CanClaim and
// the proof) and sink.CheckLog, then the new holder, the fence's version
// (sink.Fence.Version: the seq of its last history row, 'v') and a history
// row. A fence written before the proof floor was dropped asks a proof
// when its floor ('pb') is set, as sink.Fence.ProofRequired.
//
// A proven takeover (a claim below the holder whose proof's group epoch
// is below the holder's epoch) records a reset of the holder first, with
// the reason and detail it is given, and sets the proof requirement.
//
// KEYS: fence, scopes set, history, history seq.
// ARGV: epoch, member, proof version ("" for no proof), obs topic, log
// start, log end, group, topic, partition, scope id, history cap, the
// proof's group epoch (0 for none), takeover reason, takeover detail.
var claimScript = goredis.NewScript(luaPrelude + `
local f = redis.call('HMGET', KEYS[1], 'e', 'm', 'n', 't', 'pr', 'pb', 'sp', 'v')
local found = f[3] ~= false
local he, hm = tonumber(f[1] or '0'), f[2] or ''
local e, m = tonumber(ARGV[1]), ARGV[2]
local version = f[8] or '0'
local proven = ARGV[3] ~= '' and tonumber(ARGV[3]) == tonumber(version)
local takeover = false
if hm ~= '' and (e < he or (e == he and m ~= hm)) then
  local ge = tonumber(ARGV[12])
  if proven and ge > 0 and e <= ge and ge < he then
    takeover = true
  else
    return {'fenced', he, hm, version}
  end
end
local holds = hm ~= '' and he == e and hm == m
if found and not holds and (f[5] == '1' or tonumber(f[6] or '0') > 0) and not proven then
  return {'proof', version}
end
local next, topic = tonumber(f[3] or '0'), f[4] or ''
local spans = f[7] or ''
local ot = ARGV[4]
if ot ~= '' then
  if not found then
    next, topic = math.max(tonumber(ARGV[5]), 0), ot
  else
    local last = next
    if spans ~= '' then
      local to = string.match(spans, '(%d+)$')
      last = tonumber(to)
    end
    if topic ~= '' and topic ~= ot then return {'log', 'recreated', topic, num(next)} end
    if last > tonumber(ARGV[6]) then return {'log', 'truncated', topic, num(last)} end
    if tonumber(ARGV[5]) > next then return {'log', 'retention', topic, num(next)} end
    topic = ot
  end
end
if takeover then
  history(KEYS[3], KEYS[4], tonumber(ARGV[11]), 'reset', he, hm, tonumber(f[3]), ARGV[13], f[4] or '', ARGV[14], f[7] or '', '0')
  redis.call('HSET', KEYS[1], 'pr', '1')
  redis.call('HDEL', KEYS[1], 'pb')
end
local pv = '0'
if proven then pv = '1' end
local seq = history(KEYS[3], KEYS[4], tonumber(ARGV[11]), 'claim', e, m, next, '', topic, '', spans, pv)
redis.call('HSET', KEYS[1], 'e', num(e), 'm', m, 'n', num(next), 't', topic, 'v', num(seq),
  'g', ARGV[7], 'tp', ARGV[8], 'p', ARGV[9])
if not found then redis.call('HSET', KEYS[1], 'pr', '0', 'd', '0') end
redis.call('SADD', KEYS[2], ARGV[10])
return {'ok', num(next), spans}
`)

// applyScript is Apply, serial or a lane's, with or without IDs: the holder check, the
// check that the caller's view (NextOffset and the done spans, the IDs version its duplicate decisions were
// made on, the values read) is current, the validation of the buffered
// commands, the commands, the batch's row of command IDs, and NextOffset.
//
// KEYS: fence, command ID rows (zset scored by each row's last offset).
// ARGV: epoch, member, expected next, new next ("" for a replay),
// expected IDs version ("" for Apply), prune horizon ("" for none),
// duplicates, ID row ("" for none), its last offset, validate (1 when a
// command other than SET and DEL is in the batch), n reads, n commands,
// the expected done spans, the new done spans ("from-to,…"), then the
// commands (a run of SETs as one MSET: 'mset', n, n key/value
// pairs; any other as op, key, one argument, or two for hset and
// hincrby), then the reads (kind g|h, key, field, present 0|1, value).
// The data keys are arguments, not KEYS: the script runs on one server
// (no Redis Cluster), and passing them once each keeps the script's
// per-record cost near MULTI's.
var applyScript = goredis.NewScript(luaPrelude + `
local f = redis.call('HMGET', KEYS[1], 'e', 'm', 'n', 'iv', 'sp')
local hm = f[2] or ''
if hm == '' or tonumber(f[1]) ~= tonumber(ARGV[1]) or hm ~= ARGV[2] then
  if hm == '' then return {'fenced', 0, 0, ''} end
  return {'fenced', 1, tonumber(f[1]), hm}
end
local next, sp = tonumber(f[3]), f[5] or ''
if next ~= tonumber(ARGV[3]) or sp ~= ARGV[13] then return {'redo', num(next), '', sp} end
local iv = tonumber(f[4] or '0')
if ARGV[5] ~= '' and iv ~= tonumber(ARGV[5]) then return {'redo', num(next), num(iv), sp} end
local nr, nc = tonumber(ARGV[11]), tonumber(ARGV[12])
-- The commands start at ARGV[15]: 'mset', n, n key/value pairs (a run of
-- SETs), or op, key, one argument (two for hset and hincrby). The reads
-- follow: kind g|h, key, field, present 0|1, value.
local function stride(i)
  local op = ARGV[i]
  if op == 'mset' then return 2 + 2 * tonumber(ARGV[i + 1]) end
  if op == 'hset' or op == 'hincrby' then return 4 end
  return 3
end
local ci = 15
local i = ci
if nr > 0 then for j = 1, nc do i = i + stride(i) end end
for j = 1, nr do
  local kind, k, field, present, want = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  i = i + 5
  local v
  if kind == 'g' then v = redis.pcall('GET', k) else v = redis.pcall('HGET', k, field) end
  if type(v) == 'table' then return {'reads', j} end
  if (v ~= false) ~= (present == '1') or (v ~= false and v ~= want) then return {'reads', j} end
end
-- Validate every command before the first write: a script is atomic but
-- not transactional, and a command failing half way (WRONGTYPE, not an
-- integer) would leave the earlier ones applied. SET and DEL cannot
-- fail: a batch of only those skips this.
local types, strs, fields, cleared = {}, {}, {}, {}
local function typ(k)
  if types[k] == nil then types[k] = redis.call('TYPE', k).ok end
  return types[k]
end
local function isint(s) return s ~= nil and #s <= 16 and string.match(s, '^-?%d+$') ~= nil end
local limit = 9007199254740992
i = ci
for j = 1, (ARGV[10] == '1' and nc or 0) do
  local op, k, a1, a2 = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local st = stride(i)
  if op == 'mset' then
    for x = 1, tonumber(ARGV[i + 1]) do
      local kk = ARGV[i + 2 * x]
      types[kk], strs[kk], fields[kk], cleared[kk] = 'string', ARGV[i + 2 * x + 1], nil, true
    end
  elseif op == 'del' then
    types[k], strs[k], fields[k], cleared[k] = 'none', nil, nil, true
  elseif op == 'incrby' then
    local t = typ(k)
    if t ~= 'none' and t ~= 'string' then return {'invalid', j, 'INCRBY on a key holding a ' .. t} end
    local cur = '0'
    if t == 'string' then
      cur = strs[k]
      if cur == nil then cur = redis.call('GET', k) end
    end
    if not isint(cur) then return {'invalid', j, 'INCRBY on a value that is not an integer'} end
    local v = tonumber(cur) + tonumber(a1)
    if v >= limit or v <= -limit then return {'invalid', j, 'INCRBY result outside +-2^53'} end
    types[k], strs[k] = 'string', num(v)
  elseif op == 'hset' or op == 'hdel' or op == 'hincrby' then
    local t = typ(k)
    if t ~= 'none' and t ~= 'hash' then return {'invalid', j, string.upper(op) .. ' on a key holding a ' .. t} end
    if fields[k] == nil then fields[k] = {} end
    if op == 'hincrby' then
      local cur = fields[k][a1]
      if cur == nil then
        cur = false
        if t == 'hash' and not cleared[k] then cur = redis.call('HGET', k, a1) end
      end
      if cur == false then cur = '0' end
      if not isint(cur) then return {'invalid', j, 'HINCRBY on a field that is not an integer'} end
      local v = tonumber(cur) + tonumber(a2)
      if v >= limit or v <= -limit then return {'invalid', j, 'HINCRBY result outside +-2^53'} end
      fields[k][a1] = num(v)
    elseif op == 'hset' then
      fields[k][a1] = a2
    else
      fields[k][a1] = false
    end
    if op ~= 'hdel' then types[k] = 'hash' end
  elseif op == 'sadd' or op == 'srem' then
    local t = typ(k)
    if t ~= 'none' and t ~= 'set' then return {'invalid', j, string.upper(op) .. ' on a key holding a ' .. t} end
    if op == 'sadd' then types[k] = 'set' end
  elseif op == 'rpush' then
    local t = typ(k)
    if t ~= 'none' and t ~= 'list' then return {'invalid', j, 'RPUSH on a key holding a ' .. t} end
    types[k] = 'list'
  else
    return {'invalid', j, 'unknown command ' .. op}
  end
  i = i + st
end
if ARGV[4] == '' then return {'ok', num(next)} end
i = ci
for j = 1, nc do
  local op, k, a1 = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local st = stride(i)
  if op == 'mset' then redis.call('MSET', unpack(ARGV, i + 2, i + st - 1))
  elseif op == 'del' then redis.call('DEL', k)
  elseif op == 'incrby' then redis.call('INCRBY', k, a1)
  elseif op == 'hset' then redis.call('HSET', k, a1, ARGV[i + 3])
  elseif op == 'hdel' then redis.call('HDEL', k, a1)
  elseif op == 'hincrby' then redis.call('HINCRBY', k, a1, ARGV[i + 3])
  elseif op == 'sadd' then redis.call('SADD', k, a1)
  elseif op == 'srem' then redis.call('SREM', k, a1)
  elseif op == 'rpush' then redis.call('RPUSH', k, a1)
  end
  i = i + st
end
if ARGV[8] ~= '' then redis.call('ZADD', KEYS[2], ARGV[9], ARGV[8]) end
if ARGV[6] ~= '' then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[6]) end
redis.call('HSET', KEYS[1], 'n', ARGV[4], 'sp', ARGV[14])
if tonumber(ARGV[7]) > 0 then redis.call('HINCRBY', KEYS[1], 'd', ARGV[7]) end
if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'iv', num(iv + 1)) end
return {'ok', ARGV[4]}
`)

// resetScript is ResetFence: the compare-and-set on the fence the operator
// saw, fenceadmin.AfterReset (the proof requirement set for good, a
// legacy proof floor dropped), the fence's new version and a history row.
//
// KEYS: fence, history, history seq.
// ARGV: expected member ("" for none), expected epoch, expected next,
// expected topic, new next ("" keeps), new topic ("" keeps), reason,
// detail, history cap.
var resetScript = goredis.NewScript(luaPrelude + `
local f = redis.call('HMGET', KEYS[1], 'e', 'm', 'n', 't', 'pr', 'pb', 'd', 'sp', 'v')
if f[3] == false then return {'notfound'} end
local he, hm, n, t = tonumber(f[1] or '0'), f[2] or '', tonumber(f[3]), f[4] or ''
local pr = '0'
if f[5] == '1' or tonumber(f[6] or '0') > 0 then pr = '1' end
local before = {num(he), hm, num(n), t, pr, f[9] or '0', f[7] or '0', f[8] or ''}
if hm ~= ARGV[1] or (hm ~= '' and he ~= tonumber(ARGV[2])) or n ~= tonumber(ARGV[3]) or t ~= ARGV[4] then
  table.insert(before, 1, 'conflict')
  return before
end
local sp = f[8] or ''
if ARGV[5] ~= '' then n = tonumber(ARGV[5]); sp = '' end
if ARGV[6] ~= '' then t = ARGV[6] end
local seq = history(KEYS[2], KEYS[3], tonumber(ARGV[9]), 'reset', he, hm, n, ARGV[7], t, ARGV[8], sp, '0')
redis.call('HSET', KEYS[1], 'e', '0', 'm', '', 'n', num(n), 't', t, 'pr', '1', 'sp', sp, 'v', num(seq))
redis.call('HDEL', KEYS[1], 'pb')
table.insert(before, 1, 'ok')
return before
`)

// deadLetterScript is DeadLetter, serial or a lane's: the holder check,
// the check that the caller's view of the checkpoint is the stored one,
// then, unless the caller found the record done (a replay), the dead
// letter's row and index entry and the new checkpoint.
//
// KEYS: fence, dead letter seq, dead letter index (zset of IDs).
// ARGV: epoch, member, offset, key prefix of dead letter rows, record
// (JSON), topic ID, reason, group, topic, partition, expected next,
// expected spans, new next, new spans, store (1, or 0 for a replay).
var deadLetterScript = goredis.NewScript(luaPrelude + `
local f = redis.call('HMGET', KEYS[1], 'e', 'm', 'n', 't', 'sp')
local hm = f[2] or ''
if hm == '' or tonumber(f[1]) ~= tonumber(ARGV[1]) or hm ~= ARGV[2] then
  if hm == '' then return {'fenced', 0, 0, ''} end
  return {'fenced', 1, tonumber(f[1]), hm}
end
local next, sp = tonumber(f[3]), f[5] or ''
if next ~= tonumber(ARGV[11]) or sp ~= ARGV[12] then return {'redo', num(next), sp} end
if ARGV[15] ~= '1' then return {'replay', num(next)} end
local id = redis.call('INCR', KEYS[2])
local tid = ARGV[6]
if tid == '' then tid = f[4] or '' end
redis.call('HSET', ARGV[4] .. num(id), 'g', ARGV[8], 'tp', ARGV[9], 'p', ARGV[10], 'e', ARGV[1], 'm', ARGV[2],
  'o', ARGV[3], 'rec', ARGV[5], 'tid', tid, 'r', ARGV[7], 'st', 'open', 'mi', '0', 'at', now_ms())
redis.call('ZADD', KEYS[3], num(id), num(id))
redis.call('HSET', KEYS[1], 'n', ARGV[13], 'sp', ARGV[14])
return {'ok', num(id), ARGV[13]}
`)

// resolveScript is ResolveDeadLetter: the compare-and-set on the state and
// an audit row.
//
// KEYS: dead letter row, its audit list, audit seq.
// ARGV: from, to, reason, detail.
var resolveScript = goredis.NewScript(luaPrelude + `
local st = redis.call('HGET', KEYS[1], 'st')
if st == false then return {'notfound'} end
if st ~= ARGV[1] then return {'state', st} end
redis.call('HSET', KEYS[1], 'st', ARGV[2])
local seq = redis.call('INCR', KEYS[3])
redis.call('RPUSH', KEYS[2], cjson.encode({s = num(seq), f = ARGV[1], t = ARGV[2], r = ARGV[3], d = ARGV[4], at = now_ms()}))
return {'ok'}
`)

// markMirroredScript sets the mirrored flag of the dead letter rows that
// exist (KEYS), creating none.
var markMirroredScript = goredis.NewScript(luaPrelude + `
for _, k in ipairs(KEYS) do
  if redis.call('EXISTS', k) == 1 then redis.call('HSET', k, 'mi', '1') end
end
return {'ok'}
`)
