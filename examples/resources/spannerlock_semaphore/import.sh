# By the semaphore's ID:
terraform import spannerlock_semaphore.report_jobs projects/my-project/instances/my-instance/databases/my-database/tables/locks/semaphores/report-jobs

# Or by table and name, in the provider's database:
terraform import spannerlock_semaphore.report_jobs locks/semaphores/report-jobs
