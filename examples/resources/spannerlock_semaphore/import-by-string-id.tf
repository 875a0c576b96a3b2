# Terraform 1.5 and later: import in the plan, reviewed like any change.
import {
  to = spannerlock_semaphore.report_jobs
  id = "projects/my-project/instances/my-instance/databases/my-database/tables/locks/semaphores/report-jobs"
}
