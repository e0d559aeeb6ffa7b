-- wrk_report.lua: makes wrk print its summary as one machine-readable line
--   WRKJSON {"requests":..,"duration_us":..,"lat_p50_us":..,...}
-- (latency percentiles in microseconds, exact from wrk's histogram; error counts included so
-- the driver can refuse a run where any request failed or answered non-2xx/3xx).
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"bytes":%d,"err_connect":%d,"err_read":%d,' ..
    '"err_write":%d,"err_status":%d,"err_timeout":%d,"lat_mean_us":%.2f,"lat_stdev_us":%.2f,' ..
    '"lat_p50_us":%d,"lat_p90_us":%d,"lat_p99_us":%d,"lat_p999_us":%d,"lat_max_us":%d}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status,
    e.timeout, latency.mean, latency.stdev, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9), latency.max))
end
