terraform {
  # Provider-defined functions need Terraform 1.8 or later.
  required_version = ">= 1.8"
  required_providers {
    spannerlock = {
      source = "spannerlock/spannerlock"
    }
  }
}

# The statements that create the lock table "locks", for a database whose
# schema another tool or resource owns; identical to lease.DDL("locks").
output "lock_table_ddl" {
  value = provider::spannerlock::ddl("locks")
}

# The same table in a PostgreSQL-dialect database.
output "lock_table_ddl_postgresql" {
  value = provider::spannerlock::ddl("locks", "POSTGRESQL")
}
