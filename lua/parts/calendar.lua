-- Part calendar: calendar months (proleptic Gregorian, UTC) for a month tier (mirrors month_of
-- and month_start in decide.cpp, which uses std::chrono; the differential test compares the
-- two). Spliced into tier.lua at build time, where the first month tier of a call makes the two
-- functions (a function of this chunk is built anew on every call, used or not).
-- From days since 1970-01-01 by the civil-date arithmetic of Howard Hinnant's public-domain
-- algorithms: month_of(s) is the month holding µs time s as year * 12 + month - 1, and
-- month_start(i) the µs time month index i starts. Lua's doubles keep this exact for years 1700
-- to 2255 (checked against a calendar); clock times are far inside.
month_of = function(s)
    local z = (s - s % 86400000000) / 86400000000 + 719468
    local era = (z - z % 146097) / 146097
    local doe = z - era * 146097
    local yoe = doe - (doe - doe % 1460) / 1460 + (doe - doe % 36524) / 36524
    yoe = yoe - (doe - doe % 146096) / 146096
    yoe = (yoe - yoe % 365) / 365
    local doy = doe - (365 * yoe + (yoe - yoe % 4) / 4 - (yoe - yoe % 100) / 100)
    local mp = 5 * doy + 2
    mp = (mp - mp % 153) / 153  -- months since March
    local y = yoe + era * 400
    if mp >= 10 then
        -- January and February end the March-based year
        return (y + 1) * 12 + mp - 10
    end
    return y * 12 + mp + 2
end

month_start = function(i)
    local m = i % 12  -- 0: January
    local y = (i - m) / 12
    local mp  -- months since March
    if m >= 2 then
        mp = m - 2
    else
        mp = m + 10
        y = y - 1
    end
    local era = (y - y % 400) / 400
    local yoe = y - era * 400
    local doy = 153 * mp + 2
    doy = (doy - doy % 5) / 5
    local doe = yoe * 365 + (yoe - yoe % 4) / 4 - (yoe - yoe % 100) / 100 + doy
    return (era * 146097 + doe - 719468) * 86400000000
end
