-- Part tier: check one tier (mirrors check_tier and check_algorithm in decide.cpp), with
-- what its commit will write. Spliced into identifier.lua's loop over the tiers at build time
-- (cmake/embed_lua.cmake: "-- #include"), as an inline function: the body of that loop.
-- In: a (the tier's ARGV index - 1: its 11 values are a + 1 .. a + 11), j (its index in vals,
--   from 3), vals[j] (its field), c (the batch's fields of the HASH), hash, t_s and t (the
--   key's "@t"), at and at_s (the instant decided at), now, cost, always.
-- Out: the tier's three reply values at out[o + 1 ..], o, allowed and retry_after updated;
--   vals[j] its new field if it is to be committed (a log tier: commit_log's arguments; a
--   concurrency tier: its live leases), horizon, has_log, has_lease, k (past a log tier's
--   ZSET), extra (other fields a commit writes: older buckets, a void mark cleared), a += 11.
local algo = ARGV[a + 1]
local hz = ARGV[a + 10] + 0
if hz > horizon then
    horizon = hz
end
local v = vals[j]
-- check min_interval: `soon` until interval_ok_at, min_interval after the tier's
-- last admission (its field's <last>, most often "@t"), unless that admission was taken back
-- whole (its <last> in field "<tier id>|m": undo.lua), which is as no mark (decide.cpp's
-- take_back: a mark that passed min_interval then passes it at every later instant)
local mi = ARGV[a + 9]
local soon, interval_ok_at = false, 0
if v and mi ~= '0' then
    mi = mi + 0
    local ls = match(v, '^%d+')
    local last = t
    if ls ~= t_s then
        last = ls + 0
    end
    soon = mi > 0 and at - last < mi
    interval_ok_at = last + mi
    if soon then
        local mf = ARGV[a + 11] .. '|m'
        if read_field(c, hash, mf) == ls then
            soon = false
            -- a commit now sets this mark again: it is no longer void
            extra = extra or {}
            extra[#extra + 1] = mf
            extra[#extra + 1] = ''
        end
    end
end

local ok, remaining, reset, admit_at, value
if algo == 'f' or algo == 's' or algo == 'm' then
    local bucket = ARGV[a + 4] + 0
    if not (bucket > 0) then
        return redis.error_reply(ERR .. 'bad bucket')
    end
    local nb = ARGV[a + 5]
    if nb == '1' then
        nb = 1
    else
        nb = nb + 0
    end
    local off = 0
    if algo ~= 's' then
        off = ARGV[a + 6]
        if off == '0' then
            off = 0
        else
            off = off + 0
        end
    end
    local mo, ms  -- a month tier's calendar
    if algo == 'm' then
        if not month_of then
            -- #include calendar.lua
        end
        mo, ms = month_of, month_start
    end
    local id = ARGV[a + 11]
    local total, newest, first, older
    ok, remaining, reset, admit_at, total, newest, first, older =
        check_buckets(v, c, hash, id, t_s, t, at, cost, soon, always, ARGV[a + 2] + 0, bucket, nb, hz,
                      off, mo, ms)
    if total then
        value = commit_buckets(at_s, total, newest, first, older)
        if older and older ~= '' then
            -- the older buckets changed: their field is written with the head
            local of = id .. '|o'
            extra = extra or {}
            extra[#extra + 1] = of
            extra[#extra + 1] = older
        end
    end
elseif algo == 'g' then
    local T = ARGV[a + 7] + 0
    if not (T > 0) then
        return redis.error_reply(ERR .. 'bad interval')
    end
    local tat
    ok, remaining, reset, admit_at, tat = check_gcra(v, t_s, t, at, cost, soon, T, ARGV[a + 8] + 0)
    if (ok and not soon) or always then
        value = fmt('%s;%d', at_s, tat - at)  -- commit_gcra
        if tat - at > horizon then
            horizon = tat - at  -- counted past its tolerance: the state matters until tat
        end
    end
elseif algo == 'l' then
    local zset = KEYS[k]
    if not zset then
        return redis.error_reply(ERR .. 'missing log key')
    end
    k = k + 1
    has_log = true
    local per = ARGV[a + 3] + 0
    local count
    ok, remaining, reset, admit_at, count = check_log(zset, at, cost, soon, ARGV[a + 2] + 0, per, hz)
    if (ok and not soon) or always then
        value = { zset, v, count, per, hz }  -- for commit_log
    end
elseif algo == 'c' then
    local kept
    ok, remaining, kept = check_concurrency(v, at, ARGV[a + 2] + 0, ARGV[a + 6])
    reset, admit_at = 0, 0  -- when a slot frees is unknown
    has_lease = true
    value = { kept }  -- the commit adds this request's lease if it is admitted
else
    return redis.error_reply(ERR .. 'bad algorithm')
end
if soon then
    -- both constraints only loosen as time passes: the later instant meets both
    if interval_ok_at > admit_at then
        admit_at = interval_ok_at
    end
    ok = false
end

out[o + 1] = remaining
out[o + 2] = reset + (at - now)
if ok then
    out[o + 3] = 1
else
    out[o + 3] = 0
    allowed = 0
    if admit_at - now > retry_after then
        retry_after = admit_at - now
    end
end
o = o + 3
vals[j] = value
a = a + 11
