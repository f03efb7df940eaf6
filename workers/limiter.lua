-- The global upstream rate limiter's one script (workers/limiter.py): every op on a scope is atomic.
--
-- Integer microseconds keep the arithmetic exact: Redis' Lua is 5.1 with doubles, which hold
-- whole numbers up to 2**53 (about 285 years of microseconds since 1970). Times are written
-- with string.format('%.0f') so the stored value is always plain digits: Lua's own tostring()
-- uses "%.14g" and would round a 16-digit timestamp, and we don't rely on how a given Redis
-- (or fakeredis) renders a number argument. redis.replicate_commands() is needed before a write
-- that follows TIME on Redis 3.2–4 (the default from 5, a no-op kept for compatibility in 7);
-- the guard lets the same script run where it is absent (fakeredis) or removed.
--
-- ARGV[1] = op, ARGV[2] = TTL slack (ms). Every op returns Redis' "now" last.
--   reserve: ARGV[3] = interval (us, 0 = unlimited), ARGV[4] = burst tolerance tau (us),
--            ARGV[5] = the caller's longest wait (us) -> {taken 0/1, slot, now, gen}
--   check:   -> {blocked_until (0 = never blocked), now, gen (0 = no bookings)}
-- gen: the Redis time (us) at which the scope's hash got its first booking; a hash lost and booked anew
-- (a restart empty, a flush, a failover to a replica that never got it) has another one.
--   block:   ARGV[3] = block length (us) -> {max(blocked_until, now), now}
--   gate:    KEYS[2] = wire log, ARGV[3..7] as described there
--            -> {passed 0/1, go_at (passed: when it may go; else when to ask again), now,
--                why 0 free now / 1 blocked by a 429 / 2 window full}
--   sent:    KEYS[2] = wire log, ARGV[3..7] -> {time recorded, now}
if redis.replicate_commands then pcall(redis.replicate_commands) end
local key = KEYS[1]
local op = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local slack_ms = tonumber(ARGV[2])
local blk = tonumber(redis.call('HGET', key, 'blk') or '0')

local function keep_until(until_us)
  local ms = math.ceil((until_us - now) / 1000) + slack_ms
  if ms > 0 then redis.call('PEXPIRE', key, ms) end
end

if op == 'check' then
  return {blk, now, tonumber(redis.call('HGET', key, 'gen') or '0')}
end

if op == 'block' then
  local new_blk = now + tonumber(ARGV[3])
  if new_blk > blk then
    blk = new_blk
    redis.call('HSET', key, 'blk', string.format('%.0f', blk))
    local tat = tonumber(redis.call('HGET', key, 'tat') or '0')
    keep_until(math.max(blk, tat))
  end
  return {math.max(blk, now), now}
end

if op == 'gate' or op == 'sent' then
  -- The wire log KEYS[2]: a sorted set of one member per request that passed the gate, scored by when it
  -- left (reported by 'sent') or, until then, by the latest time it may leave (gate + in-flight bound).
  -- ARGV[3] = the span counted (upstream window + margin, us), ARGV[4] = the upstream's window size,
  -- ARGV[5] = the in-flight bound (us), ARGV[6] = the request's member, ARGV[7] = for 'gate' the
  -- caller's longest wait (us), for 'sent' its bound on when the request left.
  local wire = KEYS[2]
  local span = tonumber(ARGV[3])
  local keep_ms = math.ceil((span + tonumber(ARGV[5])) / 1000) + slack_ms
  if op == 'sent' then
    -- ARGV[7]: the caller's own bound on when the request left (the gate's now + what its clock measured
    -- since it called the gate); now is a bound too (this runs after the request left): keep the smaller.
    local left = math.min(now, tonumber(ARGV[7]))
    redis.call('ZADD', wire, string.format('%.0f', left), ARGV[6])
    redis.call('PEXPIRE', wire, keep_ms)
    return {left, now}
  end
  if blk > now then return {0, blk, now, 1} end
  redis.call('ZREMRANGEBYSCORE', wire, '-inf', string.format('%.0f', now - span))
  local size = tonumber(ARGV[4])
  local count = redis.call('ZCARD', wire)
  if count < size then
    redis.call('ZADD', wire, string.format('%.0f', now + tonumber(ARGV[5])), ARGV[6])
    redis.call('PEXPIRE', wire, keep_ms)
    return {1, now, now, 0}
  end
  -- Full: the caller may go once the entry that makes it full ages out of the span. If that entry has
  -- reported (its score is when it left), that time is known: book this request for it now (in flight
  -- from here on, so later callers count it) unless it is beyond the caller's budget (ARGV[7]), and the
  -- caller sleeps until it and writes without asking again. An entry still in flight is scored in the
  -- future; it reports soon, so the caller polls rather than waiting that long.
  local first = redis.call('ZRANGE', wire, count - size, count - size, 'WITHSCORES')
  local free_at = tonumber(first[2]) + span
  if tonumber(first[2]) <= now and free_at - now <= tonumber(ARGV[7]) then
    redis.call('ZADD', wire, string.format('%.0f', free_at + tonumber(ARGV[5])), ARGV[6])
    redis.call('PEXPIRE', wire, keep_ms)
    return {1, free_at, now, 2}
  end
  return {0, free_at, now, 2}
end

-- op == 'reserve'
local interval = tonumber(ARGV[3])
local tau = tonumber(ARGV[4])
local max_wait = tonumber(ARGV[5])
local slot = math.max(now, blk)
if interval <= 0 then
  if slot - now > max_wait then return {0, slot, now} end
  return {1, slot, now}
end
local tat = tonumber(redis.call('HGET', key, 'tat') or '0')
slot = math.max(slot, tat - tau)
if slot - now > max_wait then return {0, slot, now} end
tat = math.max(tat, slot) + interval
redis.call('HSETNX', key, 'gen', string.format('%.0f', now))
redis.call('HSET', key, 'tat', string.format('%.0f', tat))
keep_until(math.max(tat, blk))
return {1, slot, now, tonumber(redis.call('HGET', key, 'gen'))}
