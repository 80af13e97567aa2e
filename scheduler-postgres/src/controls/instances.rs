//! The instances' heartbeats: [`InstanceSql`](crate::controls_sql::InstanceSql)'s
//! statements run and their rows decoded.

use scheduler_core::control::{Heartbeat, InstanceRow};

use crate::error::Result;
use crate::row::{get, time};
use crate::store::PostgresStore;

impl PostgresStore {
    pub(super) async fn beat(&self, beat: &Heartbeat) -> Result<()> {
        const OP: &str = "record a heartbeat";
        let values = vec![
            beat.node.clone().into(),
            beat.version.clone().into(),
            beat.started_at.into(),
            beat.expiry().num_microseconds().unwrap_or(i64::MAX).into(),
        ];
        self.execute(OP, &self.control_sql().instances.beat, values)
            .await?;
        Ok(())
    }

    pub(super) async fn stop(&self, node: &str) -> Result<()> {
        const OP: &str = "record an instance stopped";
        let values = vec![node.to_owned().into()];
        self.execute(OP, &self.control_sql().instances.stop, values)
            .await?;
        Ok(())
    }

    pub(super) async fn instance_rows(&self) -> Result<Vec<InstanceRow>> {
        const OP: &str = "read the instances";
        let rows = self
            .query(OP, &self.control_sql().instances.read, Vec::new())
            .await?;
        rows.iter()
            .map(|row| {
                Ok(InstanceRow {
                    node: get(row, "node", OP)?,
                    version: get(row, "version", OP)?,
                    started_at: time(row, "started_at", OP)?,
                    seen_at: time(row, "seen_at", OP)?,
                    expires_at: time(row, "expires_at", OP)?,
                    stopped: get(row, "stopped", OP)?,
                    handlers: get(row, "handlers", OP)?,
                    jobs: get(row, "jobs", OP)?,
                })
            })
            .collect()
    }
}
