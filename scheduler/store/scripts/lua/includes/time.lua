-- wire.rfc3339 in Lua, for a time a script computes (a retry's run_at): epoch seconds as UTC
-- with microseconds (the civil date from days since 1970: Howard Hinnant's algorithm).

local function rfc3339(epoch)
  local micros = math.floor(epoch * 1000000 + 0.5)
  local secs = math.floor(micros / 1000000)
  micros = micros - secs * 1000000
  local days = math.floor(secs / 86400)
  local rest = secs - days * 86400
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local day = doy - math.floor((153 * mp + 2) / 5) + 1
  local month = mp < 10 and mp + 3 or mp - 9
  local year = yoe + era * 400 + (month <= 2 and 1 or 0)
  return string.format("%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", year, month, day,
    math.floor(rest / 3600), math.floor(rest % 3600 / 60), rest % 60, micros)
end
