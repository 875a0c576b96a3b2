# Who holds the permits of the "report-jobs" semaphore right now.
data "spannerlock_semaphore" "report_jobs" {
  table = spannerlock_semaphore.report_jobs.table
  name  = spannerlock_semaphore.report_jobs.name
}

output "report_jobs" {
  value = "${data.spannerlock_semaphore.report_jobs.in_use} of ${data.spannerlock_semaphore.report_jobs.permits} permits held"
}

output "report_job_holders" {
  value = [for h in data.spannerlock_semaphore.report_jobs.holders : "${h.holder_id} (token ${h.token}, until ${h.expires_at})"]
}
