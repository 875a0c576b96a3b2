# Ends the lease of whoever holds the lock "nightly-report" now, without
# asking it (Terraform 1.14 and later):
#
#   terraform apply -invoke=action.spannerlock_force_release.nightly_report
#
# Its fencing token moves on, so the holder's Guard-fenced writes fail and
# its Context ends at its next renewal; what it does outside Spanner until
# then goes on unfenced. Prefer waiting for the TTL when it is short.
action "spannerlock_force_release" "nightly_report" {
  config {
    table = "locks"
    name  = "nightly-report"
  }
}

# One permit of a semaphore (or one worker ID of a pool): its slot, as the
# spannerlock_leases data source or `spannerlock status` lists it.
action "spannerlock_force_release" "migration_permit" {
  config {
    table = "locks"
    name  = "migrations"
    slot  = 2
  }
}

# Only the holder that was read: plan it first, and the plan's warning says
# who holds the lease, with its token and deadline,
#
#   terraform plan -invoke=action.spannerlock_force_release.deploy_checked
#
# then set token to that holder's. If the lease changed hands meanwhile, the
# action ends nothing and fails, saying who holds it now.
action "spannerlock_force_release" "deploy_checked" {
  config {
    table = "locks"
    name  = "deploy"
    token = 42
  }
}
