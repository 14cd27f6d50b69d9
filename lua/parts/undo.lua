-- Part undo: mode undo, the exact taking back of an admission (mirrors take_back in decide.cpp):
-- one another node refused (Redis Cluster), or charged less at its response. Spliced into
-- rate_limit.lua at build time as the body of its mode.
-- KEYS: as the admission's check (per identifier its HASH, then its log ZSETs in tier order).
-- ARGV: time override ('' in production), 'undo', amount, whole ('1': nothing of the admission
--   stays charged, '0'), number of identifiers, then per identifier the instant its commit used
--   (its receipt, flag 'u'), its tier count n and n times the check's 11 values.
-- Per tier, whatever ran since:
--   fixed, sliding  `amount` off the count of the bucket of that instant if still held, never
--                   below 0: an emptied older bucket leaves the list, an emptied newest stays
--                   as count 0 (no bucket: buckets.lua);
--   log             the `amount` highest-numbered entries at that instant (entries at one
--                   instant are alike; their numbers stay gapless for commit_log);
--   gcra            amount * T, less "@t" - that instant (what commits since may have absorbed
--                   of it), off tat, never behind the present max(time, "@t");
--   concurrency     untouched (mode release gives a slot back);
--   min_interval    with whole, a <last> still that instant (no commit since) is made void:
--                   field "<tier id>|m" holds it (tier.lua).
-- Nothing else changes, "@t" and TTLs neither: state only shrinks. Returns how many tiers
-- changed.

if ARGV[2] == 'undo' then
    local tm = call('TIME')
    local now = tm[1] * 1000000 + tm[2]
    if ARGV[1] ~= '' then
        now = tonumber(ARGV[1])
    end
    local amount, whole, nids = tonumber(ARGV[3]), ARGV[4] == '1', tonumber(ARGV[5])
    if not now or not amount or amount < 1 or not nids then
        return redis.error_reply(ERR .. 'bad undo arguments')
    end
    -- The layout first: a call laid out wrong writes nothing.
    local a, k = 6, 1
    for _ = 1, nids do
        local n = tonumber(ARGV[a + 1])
        if not tonumber(ARGV[a]) or not n or n < 0 or not ARGV[a + 1 + 11 * n] or not KEYS[k] then
            return redis.error_reply(ERR .. 'bad tier count')
        end
        k = k + 1
        local tn = a + 1
        -- #include tier_layout.lua
        a = a + 2 + 11 * n
    end
    if a - 1 ~= #ARGV or k - 1 ~= #KEYS then
        return redis.error_reply(ERR .. 'argument count mismatch')
    end

    local changed = 0
    local month_of, month_start
    a, k = 6, 1
    for _ = 1, nids do
        local hash, at_s, n = KEYS[k], ARGV[a], ARGV[a + 1] + 0
        local at = at_s + 0
        k = k + 1
        local fields = { '@t' }
        for j = 1, n do
            fields[j + 1] = ARGV[a + 11 * j + 1]
        end
        local vals = call('HMGET', hash, unpack(fields))
        local present, kc = now, at  -- kc: the key's clock, its last commit (never before `at`)
        if vals[1] then
            local c = vals[1] + 0
            if c > present then
                present = c
            end
            if c > kc then
                kc = c
            end
        end
        local hset, h = {}, 0
        for j = 1, n do
            local b = a + 11 * j - 10
            local algo, v, id = ARGV[b + 1], vals[j + 1], ARGV[b + 11]
            local nv  -- the tier's field taken back (nil: unchanged)
            if algo == 'l' then
                local zset = KEYS[k]
                k = k + 1
                local m = call('ZCOUNT', zset, at_s, at_s)
                if m > 0 then
                    local zrem, last = {}, m - amount + 1
                    if last < 1 then
                        last = 1
                    end
                    for q = m, last, -1 do
                        zrem[#zrem + 1] = at_s .. ':' .. fmt('%d', q)
                    end
                    call('ZREM', zset, unpack(zrem))
                    changed = changed + 1
                end
            elseif v and algo == 'g' then
                local ls, d = match(v, '^(%d+);(%d+)')
                if ls then
                    local tat = ls + d
                    local give = amount * ARGV[b + 7] - (kc - at)  -- (what commits since absorbed stays)
                    if tat > present and give > 0 then
                        local nt = tat - give
                        if nt < present then
                            nt = present
                        end
                        nv = fmt('%s;%d', ls, nt - ls)
                    end
                end
            elseif v and algo ~= 'c' then
                local ls, tot, nw, f1 = match(v, '^(%d+);(%d*)|(%d+)[|/](%d*)')
                if ls then
                    local bucket, off = ARGV[b + 4] + 0, 0
                    if algo ~= 's' then
                        off = ARGV[b + 6] + 0
                    end
                    local ib, il = at + off, ls + off  -- the buckets of the instant and of <last>
                    if algo == 'm' then
                        if not month_of then
                            -- #include calendar.lua
                        end
                        ib, il = month_of(ib), month_of(il)
                    else
                        ib, il = (ib - ib % bucket) / bucket, (il - il % bucket) / bucket
                    end
                    if ib == il then
                        local x = nw + 0
                        if x > amount then
                            x = amount
                        end
                        if x > 0 and tot == '' then
                            nv = fmt('%s;|%d|', ls, nw - x)
                        elseif x > 0 then
                            nv = fmt('%s;%d|%d/%s', ls, tot - x, nw - x, f1)
                        end
                    elseif ib < il and tot ~= '' then
                        local of = id .. '|o'
                        local list = call('HGET', hash, of) or ''
                        local key = fmt('%d:', ib)
                        local p = string.find(',' .. list, ',' .. key, 1, true)  -- (list[p] starts it)
                        if p then
                            local comma = string.find(list, ',', p + #key, true)
                            local cnt = string.sub(list, p + #key, comma - 1) + 0
                            local x = cnt
                            if x > amount then
                                x = amount
                            end
                            local entry = ''
                            if cnt > x then
                                entry = fmt('%s%d,', key, cnt - x)
                            end
                            list = string.sub(list, 1, p - 1) .. entry .. string.sub(list, comma + 1)
                            if list == '' then
                                nv = fmt('%s;|%s|', ls, nw)  -- (the "|o" field is then stale)
                            else
                                nv = fmt('%s;%d|%s/%s', ls, tot - x, nw, match(list, '^(%d+):'))
                                hset[h + 1], hset[h + 2] = of, list
                                h = h + 2
                            end
                        end
                    end
                end
            end
            if nv then
                hset[h + 1], hset[h + 2] = id, nv
                h = h + 2
                changed = changed + 1
            end
            if whole and v and ARGV[b + 9] ~= '0' and match(v, '^%d+') == at_s then
                hset[h + 1], hset[h + 2] = id .. '|m', at_s
                h = h + 2
            end
        end
        if h > 0 then
            call('HSET', hash, unpack(hset))
        end
        a = a + 2 + 11 * n
    end
    return changed
end
