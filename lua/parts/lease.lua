-- Part lease: modes release and renew (mirrors release_lease and renew_lease in decide.cpp).
-- Spliced into rate_limit.lua at build time as the body of its mode.
-- ARGV[2] == 'release' or 'renew': the concurrency slots of lease ARGV[3] (a request that
-- ended, or runs on). KEYS: the identifiers' HASHes. ARGV: time override, the mode, the lease
-- id, then per identifier its number of concurrency tiers n and n times: tier id, lease_us.
-- A release drops the lease's entries; a renewal sets their expiry to max(time, "@t") +
-- lease_us, but an entry that lapsed stays lapsed (its slot may be another's now), and keeps
-- the HASH alive as long. Returns how many fields changed.

if ARGV[2] == 'release' or ARGV[2] == 'renew' then
    local renew, lease = ARGV[2] == 'renew', ARGV[3]
    local tm = call('TIME')
    local clock = tm[1] * 1000000 + tm[2]
    local now = clock
    if ARGV[1] ~= '' then
        now = tonumber(ARGV[1])
    end
    local changed, a = 0, 4
    for k = 1, #KEYS do
        local hash, n = KEYS[k], tonumber(ARGV[a])
        if not now or not n or not ARGV[a + 2 * n] then
            return redis.error_reply(ERR .. 'bad lease arguments')
        end
        a = a + 1
        local at = now
        local t = tonumber(call('HGET', hash, '@t'))
        if t and t > at then
            at = t
        end
        local keep = 0  -- how long the HASH must live (µs of Unix time)
        for _ = 1, n do
            local f, len = ARGV[a], tonumber(ARGV[a + 1])
            a = a + 2
            local v = call('HGET', hash, f)
            local head, body
            if v then
                head, body = match(v, '^(%d+;)(.*)$')
            end
            if body then
                local out, hit = {}, false
                for id, exp in string.gmatch(body, '(%d+):(%d+),') do
                    if id ~= lease or (renew and exp + 0 <= at) then
                        out[#out + 1] = id .. ':' .. exp .. ','  -- kept as it is (a lapsed one too)
                    else
                        hit = true
                        if renew then
                            out[#out + 1] = fmt('%s:%d,', id, at + len)
                            local from = at
                            if clock > from then
                                from = clock
                            end
                            if from + len > keep then
                                keep = from + len
                            end
                        end
                    end
                end
                if hit then
                    changed = changed + 1
                    call('HSET', hash, f, head .. table.concat(out))
                end
            end
        end
        if keep > 0 then
            keep = (keep + 999 - (keep + 999) % 1000) / 1000
            local e = call('HGET', hash, '@e')
            if not e or e + 0 < keep then
                call('HSET', hash, '@e', fmt('%d', keep))
                call('PEXPIREAT', hash, keep)
            end
        end
    end
    if a - 1 ~= #ARGV then
        return redis.error_reply(ERR .. 'argument count mismatch')
    end
    return changed
end
