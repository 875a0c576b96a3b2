# Who leads the "jobs" election that applications run on the table with
# (*lease.Client).Campaign, or hold with Acquire on the lease named "jobs".
data "spannerlock_leader" "jobs" {
  table = spannerlock_table.locks.name
  name  = "jobs"
}

output "jobs_leader" {
  value = data.spannerlock_leader.jobs.held ? "${data.spannerlock_leader.jobs.holder_id} (token ${data.spannerlock_leader.jobs.token}, until ${data.spannerlock_leader.jobs.expires_at})" : "nobody"
}
