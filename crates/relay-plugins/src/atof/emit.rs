//! Writing records: fresh uuids, the scope bookkeeping an end repeats, the output queue.

use std::collections::VecDeque;
use std::time::SystemTime;

use serde_json::Value;
use uuid::Uuid;

use super::Entropy;
use super::record::{self, Category, DataSchema, Record, RecordKind, ScopeCategory};

/// An open scope: what its end record repeats.
#[derive(Debug, Clone)]
pub(super) struct OpenScope {
    pub(super) uuid: Uuid,
    pub(super) parent: Option<Uuid>,
    pub(super) name: String,
    pub(super) category: Category,
    pub(super) attributes: Vec<&'static str>,
    pub(super) profile: Option<Value>,
    pub(super) schema: DataSchema,
    pub(super) metadata: Option<Value>,
    /// Recorder tick at opening: orders scopes by age.
    pub(super) opened: u64,
}

/// Writes records: uuids, timestamps and the output queue.
pub(super) struct Emitter {
    pub(super) entropy: Box<dyn Entropy>,
    pub(super) out: VecDeque<Record>,
    pub(super) tick: u64,
}

impl Emitter {
    pub(super) fn uuid(&mut self, at: SystemTime) -> Uuid {
        record::uuid_v7(at, &self.entropy.uuid_bytes())
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn open(
        &mut self,
        at: SystemTime,
        parent: Option<Uuid>,
        name: String,
        category: Category,
        attributes: Vec<&'static str>,
        profile: Option<Value>,
        schema: DataSchema,
        metadata: Option<Value>,
        data: Value,
    ) -> OpenScope {
        let scope = OpenScope {
            uuid: self.uuid(at),
            parent,
            name,
            category,
            attributes,
            profile,
            schema,
            metadata,
            opened: self.tick,
        };
        self.out.push_back(Record {
            kind: RecordKind::Scope {
                scope_category: ScopeCategory::Start,
                category: scope.category,
                attributes: scope.attributes.clone(),
                category_profile: scope.profile.clone(),
            },
            uuid: scope.uuid,
            parent_uuid: scope.parent,
            timestamp: at,
            name: scope.name.clone(),
            data,
            data_schema: Some(scope.schema),
            metadata: scope.metadata.clone(),
        });
        scope
    }

    pub(super) fn close(&mut self, at: SystemTime, scope: OpenScope, data: Value) {
        self.out.push_back(Record {
            kind: RecordKind::Scope {
                scope_category: ScopeCategory::End,
                category: scope.category,
                attributes: scope.attributes,
                category_profile: scope.profile,
            },
            uuid: scope.uuid,
            parent_uuid: scope.parent,
            timestamp: at,
            name: scope.name,
            data,
            data_schema: Some(scope.schema),
            metadata: scope.metadata,
        });
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn mark(
        &mut self,
        at: SystemTime,
        parent: Option<Uuid>,
        name: String,
        category: Category,
        schema: DataSchema,
        metadata: Option<Value>,
        data: Value,
    ) {
        let uuid = self.uuid(at);
        self.out.push_back(Record {
            kind: RecordKind::Mark {
                category,
                category_profile: None,
            },
            uuid,
            parent_uuid: parent,
            timestamp: at,
            name,
            data,
            data_schema: Some(schema),
            metadata,
        });
    }
}
