# Every lock table of the provider's database (Terraform 1.14 and later).
# `terraform query -generate-config-out=generated.tf` writes a resource block
# and an import block (by identity) for each; `terraform apply` adopts them.
list "spannerlock_table" "all" {
  provider = spannerlock
  config {
    # Optional: another database than the provider's.
    # database = "projects/my-project/instances/my-instance/databases/other"
  }
}
