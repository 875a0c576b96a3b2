# Terraform 1.12 and later: import by the table's identity, its database and
# name, rather than an ID string.
import {
  to = spannerlock_table.locks
  identity = {
    database = "projects/my-project/instances/my-instance/databases/my-database"
    name     = "locks"
  }
}
