-- Part gcra: the gcra algorithm's check (mirrors check_gcra in decide.cpp; its commit, one
-- line, is written where it is used, in tier.lua: commit_gcra).

-- gcra: one theoretical arrival time `tat` (stored as tat - last); a request of cost c is
-- admitted when max(tat, at) + c*T - tol <= at. Returns ok, remaining, reset, admit_at
-- and the tat a commit stores.
local function check_gcra(v, t_s, t, at, cost, soon, T, tol)
    local tat = at
    if v then
        local ls, d = string.match(v, '^(%d+);(%d+)')
        if ls then
            if ls == t_s then
                d = t + d
            else
                d = ls + d
            end
            if d > at then
                tat = d
            end
        end
    end
    local nxt = tat + cost * T
    local ok = nxt - at <= tol
    local debt = tat - at  -- how far the bucket is from full
    local admit_at = 0
    if not ok then
        admit_at = nxt - tol
    elseif not soon then
        debt = nxt - at
    end
    -- what remains of the tolerance, truncated toward zero like decide.cpp; one more unit
    -- comes back once the debt falls to tol - (remaining + 1) * T
    local left = tol - debt
    local remaining
    if left >= 0 then
        remaining = (left - left % T) / T
    else
        remaining = (left + -left % T) / T
    end
    local reset = 0
    if debt > 0 then
        reset = debt - tol + (remaining + 1) * T
    end
    return ok, remaining, reset, admit_at, nxt
end
