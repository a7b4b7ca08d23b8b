//! Arrow Flight SQL: statements, prepared statements with parameters, and catalog metadata,
//! for ADBC, JDBC and other Flight SQL clients.
//!
//! It is served on a port of its own (`flight_addr`, default `127.0.0.1:7091`) rather than the
//! gRPC port: that one is the cluster's, under mutual TLS with certificates only nodes hold,
//! while Flight SQL clients authenticate like other clients (TLS when `tls` is set, then a
//! password or token). Everything goes through the front door as the caller: authentication
//! ([`auth`]), authorization of every statement, limits and the cluster's distributed SQL.
//!
//! The database is the `database` call header (ADBC:
//! `adbc.flight.sql.rpc.call_header.database`), `public` without it; qualified names
//! (`db.table`) reach the others.

mod auth;
mod catalog;
mod checked;
mod statements;

use std::pin::Pin;
use std::sync::Arc;

use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::flight_service_server::FlightServiceServer;
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, Any, CommandGetCatalogs, CommandGetDbSchemas,
    CommandGetSqlInfo, CommandGetTableTypes, CommandGetTables, CommandPreparedStatementQuery,
    CommandPreparedStatementUpdate, CommandStatementQuery, CommandStatementUpdate,
    DoPutPreparedStatementResult, ProstMessageExt, SqlInfo, TicketStatementQuery,
};
use arrow_flight::{
    Action, FlightData, FlightDescriptor, FlightInfo, HandshakeRequest, HandshakeResponse, Ticket,
};
use datafusion::arrow::array::RecordBatch;
use ebb_query::access::AccessError;
use ebb_query::front::{FrontDoor, Principal, Session};
use ebb_query::{QueryError, QueryOutput};
use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use tonic::{Request, Response, Status, Streaming};

use crate::tls::conn::Incoming;

/// The database of calls without a `database` header.
pub const DEFAULT_DATABASE: &str = "public";

/// The Flight SQL service.
pub struct FlightSql {
    door: Arc<FrontDoor>,
    sessions: auth::Sessions,
    prepared: statements::PreparedStore,
    results: statements::Results,
}

type DataStream = Pin<Box<dyn Stream<Item = Result<FlightData, Status>> + Send + 'static>>;

/// A gRPC status for a refusal of the front door.
fn access_status(e: &AccessError) -> Status {
    match e {
        AccessError::Unauthenticated(m) => Status::unauthenticated(m.clone()),
        AccessError::Forbidden(m) => Status::permission_denied(m.clone()),
        e => Status::invalid_argument(e.to_string()),
    }
}

/// A gRPC status for a failed statement.
fn query_status(e: &QueryError) -> Status {
    let e = e.cause();
    match e {
        QueryError::Access(a) => access_status(a),
        QueryError::UnknownTable(_) | QueryError::UnknownDatabase(_) => {
            Status::not_found(e.to_string())
        }
        QueryError::Unavailable(_) | QueryError::NotLeader(_) | QueryError::Replication(_) => {
            Status::unavailable(e.to_string())
        }
        e if e.is_disk_full() => Status::resource_exhausted(e.to_string()),
        e if e.is_client_error() => Status::invalid_argument(e.to_string()),
        e => Status::internal(e.to_string()),
    }
}

/// Streams a query's batches as Flight data, every column nullable as its `FlightInfo` said
/// ([`statements::nullable`]).
fn stream_batches(out: QueryOutput) -> DataStream {
    let schema = statements::nullable(&out.schema);
    let announced = schema.clone();
    let batches = out.stream.map(move |b| {
        let b = b.map_err(|e| arrow_flight::error::FlightError::ExternalError(Box::new(e)))?;
        RecordBatch::try_new(announced.clone(), b.columns().to_vec())
            .map_err(arrow_flight::error::FlightError::Arrow)
    });
    let data = FlightDataEncoderBuilder::new().with_schema(schema).build(batches);
    Box::pin(data.map_err(Status::from))
}

/// Streams one batch as Flight data.
fn stream_batch(batch: RecordBatch) -> DataStream {
    let schema = batch.schema();
    let data = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(futures::stream::iter([Ok(batch)]));
    Box::pin(data.map_err(Status::from))
}

impl FlightSql {
    /// The service, over `door`.
    pub fn new(door: Arc<FrontDoor>) -> FlightSql {
        FlightSql {
            door,
            sessions: auth::Sessions::default(),
            prepared: statements::PreparedStore::default(),
            results: statements::Results::default(),
        }
    }

    /// Who a call comes from.
    async fn who<T>(&self, req: &Request<T>) -> Result<Principal, Status> {
        auth::principal(&self.door, &self.sessions, req.metadata(), req.remote_addr()).await
    }

    /// A session of the caller on the call's database, for one call that runs `sql` (calls are
    /// stateless: a session shared with other requests, as HTTP requests use, unless `sql`
    /// changes settings).
    async fn session<T>(
        &self,
        req: &Request<T>,
        sql: &str,
    ) -> Result<(Principal, Session), Status> {
        let who = self.who(req).await?;
        let db = match req.metadata().get("database") {
            Some(v) => v
                .to_str()
                .ok()
                .filter(|d| !d.is_empty())
                .ok_or_else(|| Status::invalid_argument("the database header is not a name"))?,
            None => DEFAULT_DATABASE,
        };
        let session = self.door.request_session(who.clone(), db, sql);
        Ok((who, session))
    }
}

#[tonic::async_trait]
impl FlightSqlService for FlightSql {
    type FlightService = FlightSql;

    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<
        Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>,
        Status,
    > {
        let token =
            auth::handshake(&self.door, &self.sessions, request.metadata(), request.remote_addr())
                .await?;
        let reply = HandshakeResponse { protocol_version: 0, payload: token.clone().into() };
        let mut resp: Response<Pin<Box<dyn Stream<Item = _> + Send>>> =
            Response::new(Box::pin(futures::stream::iter([Ok(reply)])));
        let header = format!("Bearer {token}")
            .parse()
            .map_err(|_| Status::internal("session token is not a header value"))?;
        resp.metadata_mut().insert("authorization", header);
        Ok(resp)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let (who, session) = self.session(&request, &query.query).await?;
        let plan = statements::plan(&session, &query.query).await?;
        if statements::is_query(plan.as_ref()) {
            let schema = statements::answer_schema(plan.as_ref());
            let ticket = statements::statement_ticket(session.database(), &query.query);
            return Ok(Response::new(statements::flight_info(
                &schema,
                ticket,
                request.into_inner(),
            )?));
        }
        // Not a query: it runs now, and its answer waits for the ticket.
        let out = session.execute(&query.query).await.map_err(|e| query_status(&e))?;
        let schema = out.schema.clone();
        let batches: Vec<RecordBatch> =
            out.stream.try_collect().await.map_err(|e| query_status(&e.into()))?;
        let handle = self.results.keep(&who, schema.clone(), batches);
        let ticket = statements::result_ticket(&handle);
        Ok(Response::new(statements::flight_info(&schema, ticket, request.into_inner())?))
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<DataStream>, Status> {
        let who = self.who(&request).await?;
        match statements::read_ticket(&ticket)? {
            statements::TicketFor::Sql { database, sql } => {
                statements::check_length(&sql)?;
                // Stateless: a shared session of the database, as HTTP requests use.
                let session = self.door.request_session(who, &database, &sql);
                let out = session.execute(&sql).await.map_err(|e| query_status(&e))?;
                Ok(Response::new(stream_batches(out)))
            }
            statements::TicketFor::Result(handle) => {
                let (schema, batches) = self.results.take(&handle, &who)?;
                let data = FlightDataEncoderBuilder::new()
                    .with_schema(schema)
                    .build(futures::stream::iter(batches.into_iter().map(Ok)));
                Ok(Response::new(Box::pin(data.map_err(Status::from))))
            }
        }
    }

    async fn do_put_statement_update(
        &self,
        cmd: CommandStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        statements::check_length(&cmd.query)?;
        let (_, session) = self.session(&request, &cmd.query).await?;
        let out = session.execute(&cmd.query).await.map_err(|e| query_status(&e))?;
        statements::affected(out).await
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let (who, session) = self.session(&request, &query.query).await?;
        self.prepared.create(&session, &who, &query.query).await
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<(), Status> {
        let who = self.who(&request).await?;
        self.prepared.close(&query.prepared_statement_handle, &who)
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let who = self.who(&request).await?;
        self.prepared.bind(&query.prepared_statement_handle, &who, request.into_inner()).await?;
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(query.prepared_statement_handle),
        })
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let who = self.who(&request).await?;
        let p = self.prepared.get(&query.prepared_statement_handle, &who)?;
        let (schema, is_query, run) = {
            let p = p.lock();
            (p.schema.clone(), p.is_query, p.run())
        };
        if is_query {
            let ticket = statements::prepared_ticket(&query.prepared_statement_handle);
            return Ok(Response::new(statements::flight_info(
                &schema,
                ticket,
                request.into_inner(),
            )?));
        }
        // Not a query: it runs now, and its answer waits for the ticket.
        let session = self.door.request_session(who.clone(), &run.database, run.sql());
        let out = statements::run_prepared(&session, &run).await?;
        let schema = out.schema.clone();
        let batches: Vec<RecordBatch> =
            out.stream.try_collect().await.map_err(|e| query_status(&e.into()))?;
        let ticket = statements::result_ticket(&self.results.keep(&who, schema.clone(), batches));
        Ok(Response::new(statements::flight_info(&schema, ticket, request.into_inner())?))
    }

    async fn do_get_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<DataStream>, Status> {
        let who = self.who(&request).await?;
        let p = self.prepared.get(&query.prepared_statement_handle, &who)?;
        let (is_query, run) = {
            let p = p.lock();
            (p.is_query, p.run())
        };
        if !is_query {
            return Err(Status::invalid_argument(
                "not a query: it runs when its FlightInfo is asked for, and its ticket fetches the answer",
            ));
        }
        let session = self.door.request_session(who, &run.database, run.sql());
        let out = statements::run_prepared(&session, &run).await?;
        Ok(Response::new(stream_batches(out)))
    }

    async fn do_put_prepared_statement_update(
        &self,
        query: CommandPreparedStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let who = self.who(&request).await?;
        let handle = query.prepared_statement_handle;
        // The values come with the update itself.
        self.prepared.bind(&handle, &who, request.into_inner()).await?;
        let run = self.prepared.get(&handle, &who)?.lock().run();
        let session = self.door.request_session(who, &run.database, run.sql());
        let out = statements::run_prepared(&session, &run).await?;
        statements::affected(out).await
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.who(&request).await?;
        let schema = query.into_builder().schema();
        metadata_info(&schema, query.as_any(), request.into_inner())
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<Ticket>,
    ) -> Result<Response<DataStream>, Status> {
        self.who(&request).await?;
        let mut b = query.into_builder();
        b.append(catalog::CATALOG);
        let batch = b.build().map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(stream_batch(batch)))
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.who(&request).await?;
        let schema = query.clone().into_builder().schema();
        metadata_info(&schema, query.as_any(), request.into_inner())
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<Ticket>,
    ) -> Result<Response<DataStream>, Status> {
        let (_, session) = self.session(&request, "").await?;
        Ok(Response::new(stream_batch(catalog::db_schemas(&session, query).await?)))
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.who(&request).await?;
        let schema = query.clone().into_builder().schema();
        metadata_info(&schema, query.as_any(), request.into_inner())
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        request: Request<Ticket>,
    ) -> Result<Response<DataStream>, Status> {
        let (_, session) = self.session(&request, "").await?;
        Ok(Response::new(stream_batch(catalog::get_tables(&session, query).await?)))
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.who(&request).await?;
        let schema = query.into_builder().schema();
        metadata_info(&schema, query.as_any(), request.into_inner())
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<Ticket>,
    ) -> Result<Response<DataStream>, Status> {
        self.who(&request).await?;
        let mut b = query.into_builder();
        for t in ["TABLE", "VIEW"] {
            b.append(t);
        }
        let batch = b.build().map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(stream_batch(batch)))
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.who(&request).await?;
        let schema = query.clone().into_builder(catalog::sql_info()).schema();
        metadata_info(&schema, query.as_any(), request.into_inner())
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<Ticket>,
    ) -> Result<Response<DataStream>, Status> {
        self.who(&request).await?;
        let batch = query
            .into_builder(catalog::sql_info())
            .build()
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(stream_batch(batch)))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}

/// A `FlightInfo` for a metadata command: its ticket is the command itself.
fn metadata_info(
    schema: &datafusion::arrow::datatypes::Schema,
    command: Any,
    descriptor: FlightDescriptor,
) -> Result<Response<FlightInfo>, Status> {
    let ticket = Ticket::new(command.encode_to_vec());
    Ok(Response::new(statements::flight_info(schema, ticket, descriptor)?))
}

/// Serves Flight SQL on `incoming` until `shutdown` resolves.
pub async fn serve(
    incoming: Incoming,
    door: Arc<FrontDoor>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let service = FlightServiceServer::new(checked::Checked(FlightSql::new(door)))
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20);
    crate::grpc::builder()
        .add_service(service)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}
