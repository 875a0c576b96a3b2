# Terraform 1.5 and later: import in the plan, reviewed like any change.
# `terraform plan -generate-config-out=generated.tf` writes the resource
# block too, if the configuration has none yet.
import {
  to = spannerlock_table.locks
  id = "projects/my-project/instances/my-instance/databases/my-database/tables/locks"
}
