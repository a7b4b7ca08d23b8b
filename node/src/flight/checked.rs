//! The Flight SQL service with the commands of `GetFlightInfo`, `PollFlightInfo`, `GetSchema`
//! and `DoGet` decoded before arrow-flight's dispatch sees them: arrow-flight answers a command
//! that does not decode (a string field that is not UTF-8, a truncated message) with
//! `Internal`, as if the server had failed; here it is `InvalidArgument`, naming what did not
//! decode. `DoPut` and `DoAction` decode their command inside arrow-flight's dispatch (a
//! `DoPut`'s is the first message of its stream), so their decode failures are recognised on
//! the way out instead ([`client_fault`]).

use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::Command;
use arrow_flight::{
    Action, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo, HandshakeRequest, PollInfo,
    SchemaResult, Ticket,
};
use prost::Message;
use tonic::{Request, Response, Status, Streaming};

/// arrow-flight's answer to a command of a known type whose body does not decode
/// (`arrow_error_to_status` of the `ParseError` that `Any::unpack` and `Command::try_from`
/// return) as the client's fault.
fn client_fault(status: Status) -> Status {
    const UNDECODED: &str = "ParseError(\"Unable to decode Any value";
    if status.code() == tonic::Code::Internal && status.message().starts_with(UNDECODED) {
        let detail = status.message().trim_start_matches("ParseError(\"").trim_end_matches("\")");
        return Status::invalid_argument(format!("the command does not decode: {detail}"));
    }
    status
}

/// `inner` with its commands checked first.
pub struct Checked<T>(pub T);

/// Checks that `bytes` decode as a Flight SQL command.
fn command(bytes: &[u8], what: &str) -> Result<(), Status> {
    let any = arrow_flight::sql::Any::decode(bytes).map_err(|e| {
        Status::invalid_argument(format!("the {what} is not a Flight SQL command: {e}"))
    })?;
    Command::try_from(any)
        .map(|_| ())
        .map_err(|e| Status::invalid_argument(format!("the {what} does not decode: {e}")))
}

#[async_trait::async_trait]
impl<T: FlightService> FlightService for Checked<T> {
    type HandshakeStream = T::HandshakeStream;
    type ListFlightsStream = T::ListFlightsStream;
    type DoGetStream = T::DoGetStream;
    type DoPutStream = T::DoPutStream;
    type DoExchangeStream = T::DoExchangeStream;
    type DoActionStream = T::DoActionStream;
    type ListActionsStream = T::ListActionsStream;

    async fn handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        self.0.handshake(request).await
    }

    async fn list_flights(
        &self,
        request: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        self.0.list_flights(request).await
    }

    async fn get_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        command(&request.get_ref().cmd, "descriptor")?;
        self.0.get_flight_info(request).await
    }

    async fn poll_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        command(&request.get_ref().cmd, "descriptor")?;
        self.0.poll_flight_info(request).await
    }

    async fn get_schema(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        command(&request.get_ref().cmd, "descriptor")?;
        self.0.get_schema(request).await
    }

    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        command(&request.get_ref().ticket, "ticket")?;
        self.0.do_get(request).await
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        self.0.do_put(request).await.map_err(client_fault)
    }

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        self.0.do_exchange(request).await
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        self.0.do_action(request).await.map_err(client_fault)
    }

    async fn list_actions(
        &self,
        request: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        self.0.list_actions(request).await
    }
}
