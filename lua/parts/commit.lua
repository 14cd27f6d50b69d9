-- Part commit: commit one identifier's tiers (mirrors commit_all and commit_tier in
-- decide.cpp). Spliced into decide() at build time, in its loop over the identifiers i.
-- vals[j + 2] holds tier j's new field (a log tier: commit_log's arguments); a0 is the
-- ARGV index of the identifier's tier count. Each key then lives `horizon` (its longest)
-- past max(at, clock): its expiry (ms) only grows, and when it must, with horizon / 8 of
-- slack, so that a busy key is not extended on every request; "@e" remembers it. In a batch
-- (known) the fields go to the batch's memory (written once at its end, batch.lua), else to
-- the HASH at once.
if pending then
    hash, at, at_s, e_s, horizon, n, has_log, has_lease, vals, a0, extra = unpack(pending[i])
end
if n > 0 then  -- a key without tiers is not written
    local from = at
    if clock > from then
        from = clock
    end
    if has_log then
        for j = 3, n + 2 do
            if ARGV[a0 + 11 * j - 32] == 'l' then
                local c = vals[j]
                vals[j] = commit_log(c[1], c[2], c[3], c[4], c[5], at, at_s, from, cost)
            end
        end
    end
    if has_lease then
        -- tier j's ARGV: its algorithm at a0 + 11j - 32, per (the lease) at - 30, lease id at - 27
        for j = 3, n + 2 do
            if ARGV[a0 + 11 * j - 32] == 'c' then
                local v, lease = fmt('%s;%s', at_s, vals[j][1]), ARGV[a0 + 11 * j - 27]
                if allowed == 1 and lease ~= '0' then
                    v = v .. fmt('%s:%d,', lease, at + ARGV[a0 + 11 * j - 30])
                end
                vals[j] = v
            end
        end
    end
    local e  -- a new "@e" (nil: the TTL is long enough)
    local need = from + horizon + 999
    need = (need - need % 1000) / 1000
    if not e_s or e_s + 0 < need then
        e = fmt('%d', need + (horizon - horizon % 8000) / 8000)
    end
    local c = known and known[hash]
    if c then
        local w = dirty[hash]
        if not w then
            w = {}
            dirty[hash] = w
            touched[#touched + 1] = hash
        end
        c['@t'], w['@t'] = at_s, true
        for j = 1, n do
            local f = ARGV[a0 + 11 * j]
            c[f], w[f] = vals[j + 2], true
        end
        if extra then
            for x = 1, #extra, 2 do
                c[extra[x]], w[extra[x]] = extra[x + 1], true
            end
        end
        if e then
            c['@e'], w['@e'] = e, true
        end
    elseif not e and not extra and n == 1 then
        call('HSET', hash, '@t', at_s, ARGV[a0 + 11], vals[3])
    elseif not e and not extra and n == 2 then
        call('HSET', hash, '@t', at_s, ARGV[a0 + 11], vals[3], ARGV[a0 + 22], vals[4])
    else
        local hset = { '@t', at_s }
        for j = 1, n do
            hset[2 * j + 1] = ARGV[a0 + 11 * j]
            hset[2 * j + 2] = vals[j + 2]
        end
        if extra then
            for x = 1, #extra do
                hset[#hset + 1] = extra[x]
            end
        end
        if e then
            hset[#hset + 1] = '@e'
            hset[#hset + 1] = e
        end
        call('HSET', hash, unpack(hset))
        if e then
            call('PEXPIREAT', hash, e)  -- after HSET, which may have made the HASH
        end
    end
end
