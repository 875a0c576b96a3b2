# Every live lease of the table, as `spannerlock status` lists them.
data "spannerlock_leases" "locks" {
  table = spannerlock_table.locks.name
}

# Warns on every plan and apply while a lease has been held for over a day:
# a stuck job, or one that should have had a shorter TTL.
check "no_stuck_leases" {
  assert {
    condition = alltrue([
      for l in data.spannerlock_leases.locks.leases :
      timecmp(timeadd(l.acquired_at, "24h"), plantimestamp()) > 0
    ])
    error_message = "A lease has been held for more than a day: ${join(", ", [
      for l in data.spannerlock_leases.locks.leases : "${l.name} by ${l.holder_id}"
      if timecmp(timeadd(l.acquired_at, "24h"), plantimestamp()) <= 0
    ])}"
  }
}

output "lease_holders" {
  value = { for l in data.spannerlock_leases.locks.leases : l.slot == null ? l.name : "${l.name}[${l.slot}]" => l.holder_id }
}
