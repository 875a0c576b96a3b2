terraform {
  required_providers {
    spannerlock = {
      source = "spannerlock/spannerlock"
    }
  }
}

# Real Spanner, with Application Default Credentials
# (`gcloud auth application-default login`, or the attached service account).
provider "spannerlock" {
  database = "projects/my-project/instances/my-instance/databases/my-database"

  # Or a key, as JSON or a file path (default: $GOOGLE_CREDENTIALS):
  # credentials = file("~/keys/terraform.json")
  #
  # Or act as a service account the caller may impersonate:
  # impersonate_service_account = "terraform@my-project.iam.gserviceaccount.com"
}

# A local emulator (gcloud emulators spanner start): no credentials are looked
# up. Leaving emulator_host out and exporting SPANNER_EMULATOR_HOST works too.
#
# provider "spannerlock" {
#   emulator_host = "localhost:9010"
#   database      = "projects/test-project/instances/test-instance/databases/test-db"
# }
