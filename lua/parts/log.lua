-- Part log: the log algorithm, one ZSET per tier (mirrors check_log and commit_log in
-- decide.cpp).

-- log: an entry counts while at < ts + per, so the live scores are (at - per, +inf).
-- Returns ok, remaining, reset, admit_at and the live count.
local function check_log(zset, at, cost, soon, lim, per, hz)
    local call = redis.call
    local lo = string.format('(%d', at - per)
    local count = call('ZCOUNT', zset, lo, '+inf')
    local ok = count + cost <= lim
    if ok and soon then
        cost = 0  -- the quota as it stands
    end
    local remaining = lim - count
    local admit_at = 0
    if ok then
        remaining = remaining - cost
    elseif cost > lim then
        admit_at = at + hz  -- never fits
    else
        admit_at = call('ZRANGEBYSCORE', zset, lo, '+inf', 'WITHSCORES', 'LIMIT', count + cost - lim - 1, 1)[2] + per
    end
    local reset = 0  -- until the oldest live entry leaves
    if count > 0 then
        reset = call('ZRANGEBYSCORE', zset, lo, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)[2] + per - at
    elseif cost > 0 then
        reset = per
    end
    return ok, remaining, reset, admit_at, count
end

-- log: drop the entries that left the window at `at`, add `cost` entries at `at`, and keep the
-- ZSET alive `hz` past `from` (as the HASH: see the commit below). v is the tier's field
-- before this commit, count the live entries its check saw. Returns the tier's new field.
-- The entries at one instant are numbered 1, 2, ... with no gap (a take-back removes the
-- highest: undo.lua), so the next number is their count.
local function commit_log(zset, v, count, per, hz, at, at_s, from, cost)
    local call, fmt = redis.call, string.format
    call('ZREMRANGEBYSCORE', zset, '-inf', fmt('%d', at - per))
    local ls, e
    if v then
        ls, e = string.match(v, '^(%d+);(%d+)')
    end
    local seq = 0
    if cost > 0 then
        -- entries at `at` exist only if this tier last admitted at `at` (or its field is gone)
        if not ls or ls == at_s then
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
    -- without a live entry before, the ZSET is new (or gone): it has no TTL
    local exp = 0
    if count > 0 and e then
        exp = e + 0
    end
    if count > 0 or cost > 0 then
        local need = from + hz + 999
        need = (need - need % 1000) / 1000
        if exp < need then
            exp = need + (hz - hz % 8000) / 8000
            call('PEXPIREAT', zset, exp)
        end
    end
    return fmt('%s;%d', at_s, exp)
end
