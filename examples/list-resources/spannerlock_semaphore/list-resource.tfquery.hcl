# The semaphores declared in table locks (Terraform 1.14 and later).
# `terraform query -generate-config-out=generated.tf` writes a resource block
# and an import block (by identity) for each; `terraform apply` adopts them.
list "spannerlock_semaphore" "locks" {
  provider = spannerlock
  config {
    table = "locks"
  }
}
