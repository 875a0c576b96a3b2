# Terraform 1.12 and later: import by the semaphore's identity, its
# database, table and name, rather than an ID string.
import {
  to = spannerlock_semaphore.migrations
  identity = {
    database = "projects/my-project/instances/my-instance/databases/my-database"
    table    = "locks"
    name     = "migrations"
  }
}
