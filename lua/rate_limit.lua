-- Sluice rate limiter: one request, every key, checked first and committed only if all admit.
--
-- This script reproduces limit::decide() (src/limit/decide.cpp) decision for decision; the
-- differential test (tests/store/test_redis_script.cpp) runs both on random traces.
-- Times are integer microseconds of Unix time. Lua numbers are doubles: every value here
-- stays an integer below 2^53, and divisions go through floor_div / trunc_div.
--
-- KEYS, per identifier in request order:
--   the identifier's HASH ("<prefix>{ip:<hex>}"), then one ZSET per `log` tier of that
--   identifier in tier order ("<prefix>{ip:<hex>}:log:<tier id>"). No key name is built here.
-- ARGV:
--   [1] time override in µs ("" in production: the clock is redis.call('TIME'))
--   [2] cost
--   [3] number of identifiers
--   then per identifier: its number of tiers n, then n times 11 values:
--     algorithm (f fixed | s sliding | g gcra | l log), limit, per_us, bucket_us, buckets,
--     burst, interval_us, tolerance_us, min_interval_us, horizon_us, tier id
-- HASH fields:
--   "@t"        the latest time a commit used (the clock never goes back before it)
--   <tier id>   "<last>;<state>" with <last> the tier's last admission (absolute µs):
--                 fixed, sliding: "<last>;<d>:<count>,<d>:<count>" non-empty buckets oldest
--                                 first, d = floor(last / bucket) - bucket index (newest: 0)
--                 gcra:           "<last>;<tat - last>"
--                 log:            "<last>" (the timestamps live in the tier's ZSET: score
--                                 <ts>, member "<ts>:<seq>", seq counting from 1 per ts)
-- Reply: { allowed (0|1), retry_after_us, then per tier in request order:
--          remaining, reset_us, admitted (0|1) }
-- retry_after and reset count from the caller's clock (ARGV[1] or TIME), even when the
-- identifier's stored "@t" is later and the decision is made at that clamped time.

local function fmt(x)
    return string.format('%d', x)
end

-- floor(a / b) for b > 0, corrected for the rounding of the double quotient.
local function floor_div(a, b)
    local q = math.floor(a / b)
    if q * b > a then
        q = q - 1
    elseif (q + 1) * b <= a then
        q = q + 1
    end
    return q
end

-- C++ integer division (truncates toward zero), b > 0.
local function trunc_div(a, b)
    if a >= 0 then
        return floor_div(a, b)
    end
    return 0 - floor_div(-a, b)
end

local function bad(msg)
    return redis.error_reply('ERR sluice rate_limit: ' .. msg)
end

-- Arguments ----------------------------------------------------------------------------

local cost = tonumber(ARGV[2])
local nkeys = tonumber(ARGV[3])
if not cost or not nkeys then
    return bad('bad cost or key count')
end

local clock_reply = redis.call('TIME')
local clock = tonumber(clock_reply[1]) * 1000000 + tonumber(clock_reply[2])
local now = clock
if ARGV[1] ~= '' then
    now = tonumber(ARGV[1])
    if not now then
        return bad('bad time override')
    end
end

local idents = {}
local a = 4
local k = 1
for i = 1, nkeys do
    local n = tonumber(ARGV[a])
    if not n or not KEYS[k] then
        return bad('bad tier count')
    end
    a = a + 1
    local ident = { hash = KEYS[k], tiers = {} }
    k = k + 1
    for j = 1, n do
        local t = {
            algo = ARGV[a],
            limit = tonumber(ARGV[a + 1]),
            per = tonumber(ARGV[a + 2]),
            bucket = tonumber(ARGV[a + 3]),
            buckets = tonumber(ARGV[a + 4]),
            burst = tonumber(ARGV[a + 5]),
            interval = tonumber(ARGV[a + 6]),
            tolerance = tonumber(ARGV[a + 7]),
            min_interval = tonumber(ARGV[a + 8]),
            horizon = tonumber(ARGV[a + 9]),
            id = ARGV[a + 10],
        }
        a = a + 11
        if not t.id or not t.horizon or not t.min_interval or not t.tolerance or not t.interval
            or not t.burst or not t.buckets or not t.bucket or not t.per or not t.limit then
            return bad('bad tier')
        end
        if t.algo == 'l' then
            t.log = KEYS[k]
            if not t.log then
                return bad('missing log key')
            end
            k = k + 1
        elseif t.algo ~= 'f' and t.algo ~= 's' and t.algo ~= 'g' then
            return bad('bad algorithm')
        end
        if (t.algo == 'f' or t.algo == 's') and t.bucket <= 0 then
            return bad('bad bucket')
        end
        if t.algo == 'g' and t.interval <= 0 then
            return bad('bad interval')
        end
        ident.tiers[j] = t
    end
    idents[i] = ident
end
if a - 1 ~= #ARGV or k - 1 ~= #KEYS then
    return bad('argument count mismatch')
end

-- State ----------------------------------------------------------------------------------

-- A tier's state: last (nil: never admitted), and by algorithm idx/cnt (buckets) or tat.
local function decode(t, v)
    local s = { idx = {}, cnt = {} }
    if not v then
        return s
    end
    local sep = string.find(v, ';', 1, true)
    if not sep then
        s.last = tonumber(v)
        return s
    end
    s.last = tonumber(string.sub(v, 1, sep - 1))
    local rest = string.sub(v, sep + 1)
    if t.algo == 'g' then
        if rest ~= '' then
            s.tat = s.last + tonumber(rest)
        end
    elseif t.algo == 'f' or t.algo == 's' then
        local base = floor_div(s.last, t.bucket)
        local n = 0
        for d, c in string.gmatch(rest, '(%d+):(%d+)') do
            n = n + 1
            s.idx[n] = base - tonumber(d)
            s.cnt[n] = tonumber(c)
        end
    end
    return s
end

local function encode(t, s)
    if t.algo == 'g' then
        return fmt(s.last) .. ';' .. fmt(s.tat - s.last)
    elseif t.algo == 'f' or t.algo == 's' then
        local base = floor_div(s.last, t.bucket)
        local parts = {}
        for i = 1, #s.idx do
            parts[i] = fmt(base - s.idx[i]) .. ':' .. fmt(s.cnt[i])
        end
        return fmt(s.last) .. ';' .. table.concat(parts, ',')
    end
    return fmt(s.last)
end

-- Checks (decide.cpp's check_*): ok, admit_at, remaining, reset -----------------------

local function check_buckets(t, s, at, c)
    local current = floor_div(at, t.bucket)
    local oldest = current - t.buckets + 1
    local count = 0
    local first_live = nil
    for i = 1, #s.idx do
        if s.idx[i] >= oldest then
            if not first_live then
                first_live = i
            end
            count = count + s.cnt[i]
        end
    end
    local ok = count + c <= t.limit
    local remaining = t.limit - count
    if ok then
        remaining = remaining - c
    end
    local function leaves(index)
        return (index + t.buckets) * t.bucket - at
    end
    if ok then
        local reset = 0
        if first_live then
            reset = leaves(s.idx[first_live])
        elseif c > 0 then
            reset = leaves(current)
        end
        return ok, 0, remaining, reset
    end
    -- Drop buckets oldest first until the request fits.
    local admit_at = 0
    local freed = 0
    for i = first_live, #s.idx do
        freed = freed + s.cnt[i]
        if count - freed + c <= t.limit then
            admit_at = (s.idx[i] + t.buckets) * t.bucket
            break
        end
    end
    return ok, admit_at, remaining, leaves(s.idx[first_live])
end

local function check_gcra(t, s, at, c)
    local tat = at
    if s.tat and s.tat > at then
        tat = s.tat
    end
    local nxt = tat + c * t.interval
    local ok = nxt - at <= t.tolerance
    local admit_at = 0
    if not ok then
        admit_at = nxt - t.tolerance
    end
    local debt = tat - at
    if ok then
        debt = nxt - at
    end
    local remaining = trunc_div(t.tolerance - debt, t.interval)
    local reset = 0
    if debt > 0 then
        reset = debt - t.tolerance + (remaining + 1) * t.interval
    end
    return ok, admit_at, remaining, reset
end

-- An entry counts while at < ts + per: scores in (at - per, +inf).
local function check_log(t, s, at, c)
    local lo = '(' .. fmt(at - t.per)
    local count = redis.call('ZCOUNT', t.log, lo, '+inf')
    local ok = count + c <= t.limit
    local remaining = t.limit - count
    if ok then
        remaining = remaining - c
    end
    local admit_at = 0
    if not ok then
        local nth = redis.call('ZRANGEBYSCORE', t.log, lo, '+inf', 'WITHSCORES', 'LIMIT', fmt(count + c - t.limit - 1), '1')
        if nth[2] then
            admit_at = tonumber(nth[2]) + t.per
        end
    end
    local reset = 0
    if count > 0 then
        local first = redis.call('ZRANGEBYSCORE', t.log, lo, '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
        reset = tonumber(first[2]) + t.per - at
    elseif c > 0 then
        reset = t.per
    end
    return ok, admit_at, remaining, reset
end

local function check_algorithm(t, s, at, c)
    if t.algo == 'g' then
        return check_gcra(t, s, at, c)
    elseif t.algo == 'l' then
        return check_log(t, s, at, c)
    end
    return check_buckets(t, s, at, c)
end

local function check_tier(t, s, at, c)
    local ok, admit_at, remaining, reset = check_algorithm(t, s, at, c)
    if t.min_interval > 0 and s.last and at - s.last < t.min_interval then
        local interval_ok_at = s.last + t.min_interval
        if ok then
            -- Quota is left but it is too soon: report the quota as it stands.
            local _, _, r0, reset0 = check_algorithm(t, s, at, 0)
            remaining = r0
            reset = reset0
            admit_at = interval_ok_at
        elseif interval_ok_at > admit_at then
            admit_at = interval_ok_at
        end
        ok = false
    end
    return ok, admit_at, remaining, reset
end

-- Check every tier of every identifier -------------------------------------------------

local allowed = 1
local retry_after = 0
local out = { 0, 0 }
for i = 1, nkeys do
    local ident = idents[i]
    local fields = { '@t' }
    for j = 1, #ident.tiers do
        fields[j + 1] = ident.tiers[j].id
    end
    local vals = redis.call('HMGET', ident.hash, unpack(fields))
    local at = now
    local last_time = vals[1] and tonumber(vals[1])
    if last_time and last_time > at then
        at = last_time
    end
    ident.at = at
    for j = 1, #ident.tiers do
        local t = ident.tiers[j]
        t.state = decode(t, vals[j + 1])
        local ok, admit_at, remaining, reset = check_tier(t, t.state, at, cost)
        out[#out + 1] = remaining
        out[#out + 1] = reset + (at - now)  -- like retry_after, from the caller's clock
        if ok then
            out[#out + 1] = 1
        else
            out[#out + 1] = 0
            allowed = 0
            -- From the caller's clock, not the clamped `at` (decide.cpp does the same).
            if admit_at - now > retry_after then
                retry_after = admit_at - now
            end
        end
    end
end
out[1] = allowed
out[2] = retry_after
if allowed == 0 then
    return out  -- a denial writes nothing
end

-- Commit ---------------------------------------------------------------------------------

-- Sets the key's TTL to cover `horizon` µs after `at` unless it already lives longer.
local function extend_ttl(key, at, horizon)
    local ahead = at - clock
    if ahead < 0 then
        ahead = 0
    end
    local ms = floor_div(horizon + ahead + 999, 1000)
    local pttl = redis.call('PTTL', key)
    if pttl < ms then
        redis.call('PEXPIRE', key, fmt(ms))
    end
end

local function commit_buckets(t, s, at, c)
    local current = floor_div(at, t.bucket)
    local oldest = current - t.buckets + 1
    local idx, cnt = {}, {}
    for i = 1, #s.idx do
        if s.idx[i] >= oldest or #idx > 0 then
            idx[#idx + 1] = s.idx[i]
            cnt[#cnt + 1] = s.cnt[i]
        end
    end
    if #idx > 0 and idx[#idx] == current then
        cnt[#cnt] = cnt[#cnt] + c
    else
        idx[#idx + 1] = current
        cnt[#cnt + 1] = c
    end
    s.idx, s.cnt = idx, cnt
end

local function commit_log(t, at, c)
    redis.call('ZREMRANGEBYSCORE', t.log, '-inf', fmt(at - t.per))
    if c > 0 then
        local ts = fmt(at)
        local seq = redis.call('ZCOUNT', t.log, ts, ts)
        local zadd = {}
        for i = 1, c do
            zadd[#zadd + 1] = ts
            zadd[#zadd + 1] = ts .. ':' .. fmt(seq + i)
        end
        redis.call('ZADD', t.log, unpack(zadd))
    end
    if redis.call('EXISTS', t.log) == 1 then
        extend_ttl(t.log, at, t.horizon)
    end
end

for i = 1, nkeys do
    local ident = idents[i]
    local at = ident.at
    if #ident.tiers > 0 then
        local hset = { '@t', fmt(at) }
        local horizon = 0
        for j = 1, #ident.tiers do
            local t = ident.tiers[j]
            local s = t.state
            if t.algo == 'g' then
                local tat = at
                if s.tat and s.tat > at then
                    tat = s.tat
                end
                s.tat = tat + cost * t.interval
            elseif t.algo == 'l' then
                commit_log(t, at, cost)
            else
                commit_buckets(t, s, at, cost)
            end
            s.last = at
            hset[#hset + 1] = t.id
            hset[#hset + 1] = encode(t, s)
            if t.horizon > horizon then
                horizon = t.horizon
            end
        end
        redis.call('HSET', ident.hash, unpack(hset))
        extend_ttl(ident.hash, at, horizon)
    end
end
return out
