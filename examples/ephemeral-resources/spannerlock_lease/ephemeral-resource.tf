# One pipeline at a time migrates the orders schema. The lease is held while
# Terraform applies (and, without acquire, while it plans too), and the
# migration tool receives the fencing token, which it stamps on what it writes.
variable "run_id" {
  description = "The CI run, recorded as the lease's holder."
  type        = string
}

variable "schema_version" {
  description = "Changing it runs the migration again."
  type        = string
}

ephemeral "spannerlock_lease" "migration" {
  table     = "locks"
  name      = "orders-migration"
  holder_id = "pipeline-${var.run_id}"
  ttl       = "30s"
  # Queue behind another pipeline for up to 15 minutes; "0s" fails at once.
  wait = "15m"
  # Take it only when applying, so that plans (of pull requests, say) neither
  # wait for it nor keep it from an apply; the token is unknown in plans.
  acquire = terraform.applying
}

resource "terraform_data" "migration" {
  triggers_replace = [var.schema_version]

  provisioner "local-exec" {
    command = "./migrate --to \"$SCHEMA_VERSION\" --fencing-token \"$FENCING_TOKEN\""
    environment = {
      SCHEMA_VERSION = var.schema_version
      FENCING_TOKEN  = ephemeral.spannerlock_lease.migration.token
    }
  }
}
