# A lock table managed by Terraform, and the current leader of an election
# that applications run on it with the lease package (see examples/leader).
terraform {
  required_providers {
    spannerlock = {
      source = "spannerlock/spannerlock"
    }
  }
}

variable "database" {
  description = "The Spanner database, projects/P/instances/I/databases/D."
  type        = string
}

variable "emulator_host" {
  description = "host:port of a Spanner emulator; null for real Spanner."
  type        = string
  default     = null
}

provider "spannerlock" {
  database      = var.database
  emulator_host = var.emulator_host
}

resource "spannerlock_table" "locks" {
  name = "locks"
  # To delete the rows of locks unused for 30 days, add cleanup_after = "30d";
  # tokens then start from the commit clock so that a deleted name still
  # resumes above every token it had.

  # Only for this demo, which destroys what it creates.
  deletion_protection = false
}

data "spannerlock_leader" "jobs" {
  table = spannerlock_table.locks.name
  name  = "jobs"
}

output "schema_version" {
  value = spannerlock_table.locks.schema_version
}

output "leader" {
  value = data.spannerlock_leader.jobs.held ? "${data.spannerlock_leader.jobs.holder_id} (token ${data.spannerlock_leader.jobs.token}, expires ${data.spannerlock_leader.jobs.expires_at})" : "nobody"
}
