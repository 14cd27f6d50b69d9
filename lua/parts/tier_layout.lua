-- Part tier_layout: one identifier's tiers checked as a call lays them out, before anything is
-- written (modes check, batch and undo). Spliced at build time where `tn` is the ARGV index of
-- the identifier's tier count and `n` that count; `k`, the KEYS index, moves past its log ZSETs.
for j = 1, n do
    local t = tn + 11 * j - 10  -- the tier's algorithm
    local algo = ARGV[t]
    if algo == 'l' then
        k = k + 1
    elseif algo == 'f' or algo == 's' or algo == 'm' then
        if not (tonumber(ARGV[t + 3]) and ARGV[t + 3] + 0 > 0) then
            return redis.error_reply(ERR .. 'bad bucket')
        end
    elseif algo == 'g' then
        if not (tonumber(ARGV[t + 6]) and ARGV[t + 6] + 0 > 0) then
            return redis.error_reply(ERR .. 'bad interval')
        end
    elseif algo ~= 'c' then
        return redis.error_reply(ERR .. 'bad algorithm')
    end
end
