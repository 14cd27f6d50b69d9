-- Sluice rate limiter: one request, every key, checked first and committed only if all admit.
--
-- This script reproduces limit::decide() (src/limit/decide.cpp) decision for decision; the
-- differential test (tests/store/test_redis_script.cpp) runs both on random traces.
-- Times are integer microseconds of Unix time. Lua numbers are doubles: every value here
-- is an integer below 2^53, so a / b for integers a, b is the double nearest the exact
-- quotient and never crosses an integer: math.floor(a / b) is floor division (and
-- truncation, for a < 0, is -math.floor(-a / b)).
--
-- It runs on every request, so it is written for the costs of Redis' Lua 5.1 (measure with
-- bench/lua_bench.sh): a redis.call is dear (a commit makes three: TIME, HMGET, HSET, and
-- PEXPIREAT only when a TTL must grow); then number <-> string conversions (~0.1-0.3 µs
-- each: tonumber or `+ 0`, string.format; `..` of a number is worse, %.14g, and wrong
-- above 1e14: numbers are written with string.format('%d')), pattern captures, C calls
-- and new tables. So: a numeric ARGV is converted only where used (compared as a string
-- first where a common value needs no conversion: min_interval "0", buckets "1", cost
-- "1"); a stored string is reused rather than re-parsed or re-formatted ("@t" is the
-- last admission of every tier the last commit wrote); a commit within a tier's newest
-- bucket rewrites only the head of its field; the reply is one presized table.
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
--   (read by algorithm: f, s: limit, bucket_us, buckets; g: interval_us, tolerance_us;
--    l: limit, per_us; all: min_interval_us, horizon_us, tier id)
-- HASH fields:
--   "@t"        the latest time a commit used (the clock never goes back before it)
--   "@e"        the HASH's expiry (absolute ms) as this script set it: a commit only extends
--               the TTL (PEXPIREAT) when it needs more than that, and then with slack
--               (horizon / 8), so a busy key is not extended on every request. Absent in a
--               HASH an older version of this script wrote: PTTL tells instead.
--   <tier id>   "<last>;<state>" with <last> the tier's last admission (absolute µs):
--                 fixed, sliding: "<last>;<total>|<newest>|<index>:<count>,<index>:<count>,..."
--                   <newest> the count of the newest bucket, the one of <last> (index
--                   floor(last / bucket)); then the older non-empty buckets oldest first
--                   by absolute index floor(time / bucket) and count; <total> the sum of
--                   every count, empty when there are no older buckets (so always for
--                   fixed). The form an older version wrote, "<last>;<d>:<count>,..."
--                   (d = floor(last / bucket) - index, oldest first), is still read; an
--                   older version reads this form as no live bucket (a rolling upgrade
--                   may admit up to a window's quota more for a tier in that window).
--                 gcra:           "<last>;<tat - last>"
--                 log:            "<last>;<the ZSET's expiry, absolute ms as set here>"
--                                 (older: "<last>"); the timestamps live in the tier's
--                                 ZSET: score <ts>, member "<ts>:<seq>", seq counting
--                                 from 1 per ts
-- A key's TTL only grows, and covers `horizon` after the key's latest commit (for a log
-- ZSET, its tier's horizon); the TTL is at most horizon / 8 longer than needed.
-- Reply: { allowed (0|1), retry_after_us, then per tier in request order:
--          remaining, reset_us, admitted (0|1) }
-- retry_after and reset count from the caller's clock (ARGV[1] or TIME), even when the
-- identifier's stored "@t" is later and the decision is made at that clamped time.

-- (locals for what a typical call uses more than once; the rest is looked up where used)
local call, floor, fmt, match = redis.call, math.floor, string.format, string.match

-- gcra: what remains of the tolerance once `debt` (tat - now) is owed, truncated toward
-- zero like decide.cpp, and when one more unit comes back (0: none is owed).
local function gcra_quota(debt, tol, T)
    local q = (tol - debt) / T
    local remaining
    if q >= 0 then
        remaining = floor(q)
    else
        remaining = -floor(-q)
    end
    if debt > 0 then
        return remaining, debt - tol + (remaining + 1) * T
    end
    return remaining, 0
end
local ARGV, KEYS = ARGV, KEYS
local ERR = 'ERR sluice rate_limit: '

local cost = ARGV[2]
if cost == '1' then
    cost = 1
else
    cost = tonumber(cost)
end
local nkeys = ARGV[3]
if nkeys == '1' then
    nkeys = 1
else
    nkeys = tonumber(nkeys)
end
if not cost or not nkeys then
    return redis.error_reply(ERR .. 'bad cost or key count')
end
local cost_s = '1'  -- the cost as a bucket field writes it
if cost ~= 1 then
    cost_s = fmt('%d', cost)
end

local tm = call('TIME')
local clock = tm[1] * 1000000 + tm[2]
local now = clock
if ARGV[1] ~= '' then
    now = tonumber(ARGV[1])
    if not now then
        return redis.error_reply(ERR .. 'bad time override')
    end
end

-- Check every tier of every key ---------------------------------------------------------

local allowed, retry_after = 1, 0
local out = { 0, 0, nil, nil, nil, nil, nil, nil, nil, nil, nil }
local no = 2
-- the commit arguments of the last identifier, and with several, of each (`later`)
local c_hash, c_at, c_at_s, c_last_time, c_hash_exp, c_horizon, c_n, c_vals, c_a0
local later
if nkeys > 1 then
    later = {}
end
local a, k = 4, 1
for i = 1, nkeys do
    local a0 = a
    local n = ARGV[a]
    if n == '1' then
        n = 1
    elseif n == '2' then
        n = 2
    else
        n = tonumber(n)
    end
    local hash = KEYS[k]
    if not n or not hash or not ARGV[a + 11 * n] then
        return redis.error_reply(ERR .. 'bad tier count')
    end
    k = k + 1
    local vals
    if n == 1 then
        vals = call('HMGET', hash, '@t', '@e', ARGV[a + 11])
    elseif n == 2 then
        vals = call('HMGET', hash, '@t', '@e', ARGV[a + 11], ARGV[a + 22])
    else
        local fields = { '@t', '@e' }
        for j = 1, n do
            fields[j + 2] = ARGV[a + 11 * j]
        end
        vals = call('HMGET', hash, unpack(fields))
    end
    local last_time = vals[1]
    local at, prev = now, nil
    if last_time then
        prev = last_time + 0
        if prev > at then
            at = prev
        end
    end
    local at_s = last_time
    if at ~= prev then
        at_s = fmt('%d', at)
    end
    local horizon = 0
    for j = 3, n + 2 do
        local algo = ARGV[a + 1]
        local hz = ARGV[a + 10] + 0
        if hz > horizon then
            horizon = hz
        end
        local v = vals[j]
        -- min_interval: `soon` when the tier admitted less than min_interval ago
        local mi = ARGV[a + 9]
        local last
        local soon = false
        if mi == '0' then
            mi = 0
        else
            mi = mi + 0
            if v and mi > 0 then
                local ls = match(v, '^%d+')
                if ls == last_time then
                    last = prev
                else
                    last = ls + 0
                end
                soon = at - last < mi
            end
        end
        local ok, remaining, reset, value
        local admit_at = 0
        -- with soon and ok: the quota as it stands (cost 0)
        local remaining0, reset0

        if algo == 'f' or algo == 's' then
            local lim = ARGV[a + 2] + 0
            local bucket = ARGV[a + 4] + 0
            local nb = ARGV[a + 5]
            if nb == '1' then
                nb = 1
            else
                nb = nb + 0
            end
            if not (bucket > 0) then
                return redis.error_reply(ERR .. 'bad bucket')
            end
            local cur = floor(at / bucket)
            local oldest = cur - nb + 1
            local count = 0
            local first  -- the index of the oldest live bucket (nil: none)
            local state = 0  -- 0: no live bucket; 1: the newest is cur; 2: older, some live
            local tot, nw, p, kept, f1
            if v then
                local ls
                ls, tot, nw, p, f1 = match(v, '^(%d+);(%d*)|(%d+)|()(%d*)')
                if not ls then
                    -- the older form: "<last>;<d>:<count>,..." oldest first, the newest d 0
                    local rest
                    ls, rest = match(v, '^(%d+);?(.*)$')
                    local base = floor(ls / bucket)
                    local pairs_s, total, np, nd, nc = '', 0, 0, nil, nil
                    for d, c in string.gmatch(rest, '(%d+):(%d+)') do
                        if nd then
                            pairs_s = pairs_s .. fmt('%d:%s,', base - nd, nc)
                        end
                        nd, nc = d, c
                        total = total + c
                        np = np + 1
                    end
                    if np == 0 or nd + 0 ~= 0 then
                        ls = nil  -- no bucket
                    elseif np == 1 then
                        v = ls .. ';|' .. nc .. '|'
                    else
                        v = fmt('%s;%d|%s|', ls, total, nc) .. pairs_s
                    end
                    if ls then
                        ls, tot, nw, p, f1 = match(v, '^(%d+);(%d*)|(%d+)|()(%d*)')
                    end
                end
                if ls then
                    -- the newest bucket is the one of the tier's last admission
                    local newest
                    if ls == last_time then
                        newest = floor(prev / bucket)
                    else
                        newest = floor(ls / bucket)
                    end
                    if newest == cur then
                        -- every stored bucket is live (the last commit dropped the others)
                        state = 1
                        if tot == '' then
                            count = nw + 0
                            first = cur
                        else
                            count = tot + 0
                            first = f1 + 0  -- the oldest older bucket
                        end
                    elseif newest >= oldest then
                        -- drop the older buckets that left the window, oldest first
                        state = 2
                        local q = p
                        if tot == '' then
                            count = nw + 0
                        else
                            local dead = 0
                            while true do
                                local colon = string.find(v, ':', q, true)
                                if not colon then
                                    break
                                end
                                local idx = string.sub(v, q, colon - 1) + 0
                                if idx >= oldest then
                                    first = idx
                                    break
                                end
                                local comma = string.find(v, ',', colon, true)
                                dead = dead + string.sub(v, colon + 1, comma - 1)
                                q = comma + 1
                            end
                            count = tot - dead
                        end
                        first = first or newest
                        -- the live older buckets and the newest: the older ones of a commit
                        kept = string.sub(v, q) .. fmt('%d:%s,', newest, nw)
                    end
                end
            end
            ok = count + cost <= lim
            remaining = lim - count
            if ok then
                remaining = remaining - cost
                if first then
                    reset = (first + nb) * bucket - at
                elseif cost > 0 then
                    reset = (cur + nb) * bucket - at
                else
                    reset = 0
                end
                if soon then
                    remaining0 = lim - count
                    reset0 = 0
                    if first then
                        reset0 = (first + nb) * bucket - at
                    end
                elseif state == 1 then
                    -- the older buckets stay as they are
                    if tot == '' then
                        value = fmt('%s;|%d|', at_s, nw + cost)
                    else
                        value = fmt('%s;%d|%d|', at_s, count + cost, nw + cost) .. string.sub(v, p)
                    end
                elseif state == 2 then
                    value = fmt('%s;%d|%s|', at_s, count + cost, cost_s) .. kept
                else
                    value = at_s .. ';|' .. cost_s .. '|'
                end
            else
                admit_at = at + hz  -- a cost above the limit never fits
                reset = 0
                if first then
                    reset = (first + nb) * bucket - at
                    -- Drop live buckets oldest first until the request fits.
                    local src, q = kept, 1
                    if state == 1 then
                        src, q = v, p
                    end
                    local freed = 0
                    local fits
                    while true do
                        local colon = string.find(src, ':', q, true)
                        if not colon then
                            break
                        end
                        local comma = string.find(src, ',', colon, true)
                        freed = freed + string.sub(src, colon + 1, comma - 1)
                        if count - freed + cost <= lim then
                            fits = string.sub(src, q, colon - 1) + 0
                            break
                        end
                        q = comma + 1
                    end
                    if not fits and state == 1 and count - (freed + nw) + cost <= lim then
                        fits = cur
                    end
                    if fits then
                        admit_at = (fits + nb) * bucket
                    end
                end
            end

        elseif algo == 'g' then
            local T = ARGV[a + 7] + 0
            local tol = ARGV[a + 8] + 0
            if not (T > 0) then
                return redis.error_reply(ERR .. 'bad interval')
            end
            local tat = at
            if v then
                local ls, d = match(v, '^(%d+);(%d+)')
                if ls then
                    if not last then
                        if ls == last_time then
                            last = prev
                        else
                            last = ls + 0
                        end
                    end
                    if last + d > at then
                        tat = last + d
                    end
                end
            end
            local nxt = tat + cost * T
            ok = nxt - at <= tol
            local debt = tat - at
            if ok then
                debt = nxt - at
            else
                admit_at = nxt - tol
            end
            remaining, reset = gcra_quota(debt, tol, T)
            if ok then
                if soon then
                    remaining0, reset0 = gcra_quota(tat - at, tol, T)
                else
                    value = fmt('%s;%d', at_s, nxt - at)
                end
            end

        elseif algo == 'l' then  -- an entry counts while at < ts + per: scores in (at - per, +inf)
            local lim = ARGV[a + 2] + 0
            local per = ARGV[a + 3] + 0
            local zset = KEYS[k]
            if not zset then
                return redis.error_reply(ERR .. 'missing log key')
            end
            k = k + 1
            local zexp
            if v then
                local ls, e = match(v, '^(%d+);?(%d*)')
                if not last then
                    if ls == last_time then
                        last = prev
                    else
                        last = ls + 0
                    end
                end
                if e ~= '' then
                    zexp = e + 0
                end
            end
            local lo = '(' .. fmt('%d', at - per)
            local count = call('ZCOUNT', zset, lo, '+inf')
            local first = 0  -- reset: until the oldest live entry leaves
            if count > 0 then
                first = call('ZRANGEBYSCORE', zset, lo, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)[2] + per - at
            end
            ok = count + cost <= lim
            remaining = lim - count
            if ok then
                remaining = remaining - cost
            elseif cost > lim then
                admit_at = at + hz
            else
                admit_at = call('ZRANGEBYSCORE', zset, lo, '+inf', 'WITHSCORES', 'LIMIT', count + cost - lim - 1, 1)[2] + per
            end
            if count > 0 then
                reset = first
            elseif cost > 0 then
                reset = per
            else
                reset = 0
            end
            if ok then
                if soon then
                    remaining0 = lim - count
                    reset0 = first
                else
                    value = { zset, per, count, last, zexp, hz }
                end
            end
        else
            return redis.error_reply(ERR .. 'bad algorithm')
        end

        if soon then
            local interval_ok_at = last + mi
            if ok then
                -- Quota is left but it is too soon: report the quota as it stands.
                remaining = remaining0
                reset = reset0
                admit_at = interval_ok_at
            elseif interval_ok_at > admit_at then
                admit_at = interval_ok_at
            end
            ok = false
        end

        out[no + 1] = remaining
        out[no + 2] = reset + (at - now)  -- like retry_after, from the caller's clock
        if ok then
            out[no + 3] = 1
        else
            out[no + 3] = 0
            allowed = 0
            -- From the caller's clock, not the clamped `at` (decide.cpp does the same).
            if admit_at - now > retry_after then
                retry_after = admit_at - now
            end
        end
        no = no + 3
        vals[j] = value
        a = a + 11
    end
    a = a + 1
    c_hash, c_at, c_at_s, c_last_time, c_hash_exp, c_horizon, c_n, c_vals, c_a0 =
        hash, at, at_s, last_time, vals[2], horizon, n, vals, a0
    if later then
        later[i] = { hash, at, at_s, last_time, vals[2], horizon, n, vals, a0 }
    end
end
if a - 1 ~= #ARGV or k - 1 ~= #KEYS then
    return redis.error_reply(ERR .. 'argument count mismatch')
end
out[1] = allowed
out[2] = retry_after
if allowed == 0 then
    return out  -- a denial writes nothing
end

-- Commit ---------------------------------------------------------------------------------

-- Per identifier: `vals` holds the new field values (log tiers: what their commit needs);
-- a0 is the ARGV index of the identifier's tier count.
for i = 1, nkeys do
    local hash, at, at_s, last_time, hash_exp, horizon, n, vals, a0 =
        c_hash, c_at, c_at_s, c_last_time, c_hash_exp, c_horizon, c_n, c_vals, c_a0
    if later then
        local c = later[i]
        hash, at, at_s, last_time, hash_exp, horizon, n, vals, a0 = c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9]
    end
    if n > 0 then
        -- TTLs cover `horizon` after max(at, clock)
        local from = at
        if clock > from then
            from = clock
        end
        for j = 3, n + 2 do
            local value = vals[j]
            if ARGV[a0 + 11 * j - 32] == 'l' then
                -- log: drop what left the window, add `cost` entries at `at`, extend the TTL
                local zset, per, count, last, zexp, hz = value[1], value[2], value[3], value[4], value[5], value[6]
                call('ZREMRANGEBYSCORE', zset, '-inf', fmt('%d', at - per))
                if cost > 0 then
                    -- entries at `at` exist only if this tier last admitted at `at`
                    local seq = 0
                    if not last or last == at then
                        seq = call('ZCOUNT', zset, at_s, at_s)
                    end
                    if cost == 1 then
                        call('ZADD', zset, at_s, at_s .. ':' .. fmt('%d', seq + 1))
                    else
                        local zadd = {}
                        for i = 1, cost do
                            zadd[2 * i - 1] = at_s
                            zadd[2 * i] = at_s .. ':' .. fmt('%d', seq + i)
                        end
                        call('ZADD', zset, unpack(zadd))
                    end
                end
                if count > 0 or cost > 0 then
                    local need = floor((from + hz + 999) / 1000)
                    local set = need + floor(hz / 8000)
                    if count == 0 then
                        -- emptied (ZREMRANGEBYSCORE) or absent, made anew by ZADD: no TTL
                        call('PEXPIREAT', zset, set)
                        zexp = set
                    else
                        if not zexp then
                            -- written by an older version: PTTL tells (it runs after TIME)
                            local pttl = call('PTTL', zset)
                            if pttl >= 0 then
                                zexp = floor(clock / 1000) + pttl
                            end
                        end
                        if not zexp or zexp < need then
                            call('PEXPIREAT', zset, set)
                            zexp = set
                        end
                    end
                end
                if zexp then
                    vals[j] = fmt('%s;%d', at_s, zexp)
                else
                    vals[j] = at_s
                end
            end
        end
        local need = floor((from + horizon + 999) / 1000)
        local e  -- a new "@e" (nil: unchanged)
        local expire = false
        if not last_time then
            -- a new HASH (every commit writes "@t"): PEXPIREAT after HSET
            e = need + floor(horizon / 8000)
            expire = true
        elseif not hash_exp then
            -- written by an older version: PTTL tells (it runs after TIME)
            local pttl = call('PTTL', hash)
            e = floor(clock / 1000) + pttl
            if pttl < 0 or e < need then
                e = need + floor(horizon / 8000)
                expire = true
            end
        elseif hash_exp + 0 < need then
            e = need + floor(horizon / 8000)
            expire = true
        end
        if n == 1 and not e then
            call('HSET', hash, '@t', at_s, ARGV[a0 + 11], vals[3])
        elseif n == 2 and not e then
            call('HSET', hash, '@t', at_s, ARGV[a0 + 11], vals[3], ARGV[a0 + 22], vals[4])
        else
            local hset = { '@t', at_s }
            for j = 1, n do
                hset[2 * j + 1] = ARGV[a0 + 11 * j]
                hset[2 * j + 2] = vals[j + 2]
            end
            if e then
                e = fmt('%d', e)
                hset[2 * n + 3] = '@e'
                hset[2 * n + 4] = e
            end
            call('HSET', hash, unpack(hset))
        end
        if expire then
            call('PEXPIREAT', hash, e)
        end
    end
end
return out
