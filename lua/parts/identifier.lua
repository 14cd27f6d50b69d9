-- Part identifier: check every tier of one identifier (mirrors the loop body of check_all
-- in decide.cpp): its HASH's fields (from the batch's memory or one HMGET), the key's clock
-- ("@t": never back before it), then each tier (tier.lua). Spliced into decide() at build time.
-- In: a (the ARGV index of its tier count), k (of its HASH in KEYS), i, known, now.
-- Out: hash, at, at_s, e_s, horizon, n, has_log, has_lease, vals, a0, extra (what commit.lua
--   needs: in pending[i] too with several identifiers), a and k past it; the reply's values of
--   its tiers.
a0, n = a, ARGV[a]
if n == '1' then
    n = 1
elseif n == '2' then
    n = 2
else
    n = tonumber(n)
end
hash = KEYS[k]
if not n or not hash or not ARGV[a + 11 * n] then
    return redis.error_reply(ERR .. 'bad tier count')
end
k = k + 1
-- "@t", "@e" and the tiers' fields: from `known` if the batch has seen them all
local c = known and known[hash]
vals = nil
if c and c ~= true then
    vals = { c['@t'], c['@e'], nil, nil }  -- (sized for two tiers: no growing)
    for j = 1, n do
        local v = c[ARGV[a + 11 * j]]
        if v == nil then
            vals = nil
            break
        end
        vals[j + 2] = v
    end
end
if not vals then
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
    -- a field known is newer than the one stored (written later, at the end)
    if c == true then
        c = { ['@t'] = vals[1], ['@e'] = vals[2] }
        known[hash] = c
    elseif c then
        vals[1], vals[2] = c['@t'], c['@e']
    end
    if c then
        for j = 1, n do
            local f = ARGV[a + 11 * j]
            local v = c[f]
            if v == nil then
                c[f] = vals[j + 2]
            else
                vals[j + 2] = v
            end
        end
    end
end
-- the key's clock never goes back before its "@t"
local t_s = vals[1]
local t
at, at_s = now, nil
if t_s then
    t = t_s + 0
    if t >= at then
        at, at_s = t, t_s
    end
end
if not at_s then
    at_s = fmt('%d', at)
end
e_s, horizon, has_log, has_lease, extra = vals[2], 0, false, false, nil
for j = 3, n + 2 do
    -- #include tier.lua
end
a = a + 1
if pending then
    pending[i] = { hash, at, at_s, e_s, horizon, n, has_log, has_lease, vals, a0, extra }
end
