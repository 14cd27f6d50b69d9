-- Part buckets: the fixed, sliding and calendar-month algorithms (mirrors check_buckets,
-- commit_buckets, bucket_of, leaves_at, month_of and month_start in decide.cpp).

-- fixed and sliding: `nb` buckets of `bucket` µs, numbered in time shifted by `off` (so
-- fixed windows follow the clock of UTC + off); the window at `at` is the bucket holding `at` and
-- the nb - 1 before it, and a bucket with index i counts until (i + nb) * bucket - off.
-- For a calendar month tier, month_of and month_start (below) are passed: a bucket is then
-- a calendar month of the shifted time (nb is 1).
-- v is the tier's head field (see the header), t_s and t the key's "@t" as stored and as a number.
-- The older buckets are read (field "<id>|o" of `hash`, c its fields: read_field) only when the
-- window moved past the newest bucket or a denial must find when the request fits: most requests
-- touch the head alone. A newest count of 0 (a commit of cost 0, or taken back: undo.lua) is no
-- bucket, as decide.cpp's buckets of count 0; the older list holds none. With `soon` (its
-- min_interval not yet passed) an admissible request reports the quota as it stands, as
-- decide.cpp's check with cost 0 does. Returns ok, remaining, reset, admit_at, then what
-- commit_buckets needs if the request is to be committed (admitted, or `always`): the total and
-- the newest count a commit leaves, the index of the oldest older bucket, and the older buckets to
-- write ("<index>:<count>," each, oldest first; nil: the stored ones stand).
local function check_buckets(v, c, hash, id, t_s, t, at, cost, soon, always, lim, bucket, nb, hz, off,
                              month_of, month_start)
    local sa = at + off  -- in shifted time: a reset is a difference, the same in both
    local cur
    if month_of then
        cur = month_of(sa)
    else
        cur = (sa - sa % bucket) / bucket
    end
    local oldest = cur - nb + 1
    local count = 0
    local first  -- the index of the oldest live bucket (nil: none)
    local newest_live = false  -- the newest stored bucket is cur
    local nw, tot  -- the stored newest count and total ('': no older bucket)
    local src, q  -- the older buckets' list, from q on (nil: not read yet)
    local moved  -- the older list changed: it must be written
    if v then
        local ls, f1
        ls, tot, nw, f1 = string.match(v, '^(%d+);(%d*)|(%d+)[|/](%d*)')
        if ls then
            local newest = t
            if ls ~= t_s then
                newest = ls + 0
            end
            newest = newest + off
            if month_of then
                newest = month_of(newest)
            else
                newest = (newest - newest % bucket) / bucket
            end
            if newest == cur then
                -- every stored bucket is live (the last commit dropped the others)
                newest_live = true
                if tot == '' then
                    count = nw + 0
                    if count > 0 then
                        first = cur
                    end
                else
                    count = tot + 0
                    first = f1 + 0
                end
            elseif newest >= oldest then
                -- drop the older buckets that left the window, oldest first
                if tot == '' then
                    count = nw + 0
                else
                    src, q = read_field(c, hash, id .. '|o'), 1
                    local find, sub = string.find, string.sub
                    local dead = 0
                    while true do
                        local colon = find(src, ':', q, true)
                        if not colon then
                            break
                        end
                        local idx = sub(src, q, colon - 1) + 0
                        if idx >= oldest then
                            first = idx
                            break
                        end
                        local comma = find(src, ',', colon, true)
                        dead = dead + sub(src, colon + 1, comma - 1)
                        q = comma + 1
                    end
                    count = tot - dead
                end
                -- the newest becomes an older bucket (if it holds any)
                src, q, moved = string.sub(src or '', q or 1), 1, true
                if nw ~= '0' then
                    first = first or newest
                    src = src .. string.format('%d:%s,', newest, nw)
                end
            elseif tot ~= '' then
                src, q, moved = '', 1, true  -- every bucket left the window
            end
        end
    end

    local remaining = lim - count
    local reset = 0
    if first then
        if month_of then
            reset = month_start(first + 1) - sa
        else
            reset = (first + nb) * bucket - sa
        end
    end
    local ok = count + cost <= lim
    local newest_count, older  -- what a commit leaves (nil: no commit)
    if (ok and not soon) or always then
        if not newest_live then
            newest_count, older = cost, src or ''
        elseif tot == '' then  -- the newest is the only bucket: count is its count
            newest_count, older = count + cost, ''
        else
            newest_count = nw + cost
            if moved then
                older = string.sub(src, q)
            end
        end
    end
    local total = newest_count and count + cost
    if ok then
        if soon then
            return true, remaining, reset, 0, total, newest_count, first, older
        end
        if not first and cost > 0 then
            if month_of then
                reset = month_start(cur + 1) - sa
            else
                reset = (cur + nb) * bucket - sa
            end
        end
        return true, remaining - cost, reset, 0, total, newest_count, first, older
    end

    -- Denied: drop live buckets oldest first until the request fits; it is admitted once
    -- the last dropped bucket has left the window. A cost above the limit never fits.
    local admit_at = at + hz
    if first then
        if not src then
            if tot == '' then
                src = ''
            else
                src = read_field(c, hash, id .. '|o')
            end
            q = 1
        end
        local find, sub = string.find, string.sub
        local freed = 0
        local fits
        while true do
            local colon = find(src, ':', q, true)
            if not colon then
                break
            end
            local comma = find(src, ',', colon, true)
            freed = freed + sub(src, colon + 1, comma - 1)
            if count - freed + cost <= lim then
                fits = sub(src, q, colon - 1) + 0
                break
            end
            q = comma + 1
        end
        -- when the newest is cur, it is not in src
        if not fits and newest_live and count - (freed + nw) + cost <= lim then
            fits = cur
        end
        if fits then
            if month_of then
                admit_at = month_start(fits + 1) - off
            else
                admit_at = (fits + nb) * bucket - off
            end
        end
    end
    return false, remaining, reset, admit_at, total, newest_count, first, older
end

-- The head of a bucket tier after a commit at `at` (see check_buckets; without an older
-- bucket: "<at>;|<newest>|").
local function commit_buckets(at_s, total, newest, first, older)
    if older == '' or not first then
        return string.format('%s;|%d|', at_s, newest)
    end
    return string.format('%s;%d|%d/%d', at_s, total, newest, first)
end

