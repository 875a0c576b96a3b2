# A database created and owned by the google provider, with the lock table in
# its ddl, and this provider reading and declaring things in that table.
terraform {
  required_version = ">= 1.8"
  required_providers {
    google = {
      source = "hashicorp/google"
    }
    spannerlock = {
      source = "spannerlock/spannerlock"
    }
  }
}

resource "google_spanner_database" "orders" {
  instance = "main"
  name     = "orders"
  ddl = concat(
    [
      "CREATE TABLE orders (id STRING(36) NOT NULL, total NUMERIC) PRIMARY KEY (id)",
    ],
    # Last: google_spanner_database runs only statements appended to ddl.
    provider::spannerlock::ddl("locks"),
  )
  # The default, spelled out: a changed ddl element makes the google provider
  # plan a replacement of the whole database, which this refuses.
  deletion_protection = true
}

provider "spannerlock" {
  # google_spanner_database's id is "instance/name", not the full path.
  database = "projects/${google_spanner_database.orders.project}/instances/${google_spanner_database.orders.instance}/databases/${google_spanner_database.orders.name}"
}

# The table belongs to the database's ddl, so there is no spannerlock_table;
# the data source and the semaphore use it by name.
data "spannerlock_leader" "scheduler" {
  table = "locks"
  name  = "scheduler"
}

resource "spannerlock_semaphore" "exports" {
  table   = "locks"
  name    = "exports"
  permits = 2

  depends_on = [google_spanner_database.orders]
}
