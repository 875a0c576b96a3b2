# At most 4 report jobs run at once, whichever replicas run them.
# Applications take a permit with (*lease.Client).AcquirePermit(ctx, "report-jobs").
resource "spannerlock_semaphore" "report_jobs" {
  table   = spannerlock_table.locks.name
  name    = "report-jobs"
  permits = 4
}
