-- Part concurrency: leased slots (mirrors check_concurrency in decide.cpp; the commit adds
-- the lease in commit.lua, as commit_concurrency; release and renewal are lease.lua).

-- concurrency: a lease counts while at < its expiry. With lease '0' (a charge, not a
-- request) nothing is checked. Returns ok, remaining and the live leases as stored.
local function check_concurrency(v, at, lim, lease)
    local live, kept, from = 0, nil, 1  -- kept: the live stretches before a lapsed lease
    local body = v and string.match(v, '^%d+;(.*)$')
    if body then
        for p, exp, q in string.gmatch(body, '()%d+:(%d+),()') do
            if exp + 0 > at then
                live = live + 1
            else
                kept = kept or {}
                kept[#kept + 1] = string.sub(body, from, p - 1)
                from = q
            end
        end
    end
    local ok = lease == '0' or live < lim
    local remaining = lim - live
    if ok and lease ~= '0' then
        remaining = remaining - 1
    end
    if not kept then
        return ok, remaining, body or ''
    end
    kept[#kept + 1] = string.sub(body, from)
    return ok, remaining, table.concat(kept)
end
