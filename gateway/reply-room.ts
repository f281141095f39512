/**
 * The parties of a client's reply room (`FrontendConnection.replyReserved`, one budget for every route:
 * `frontend.maxReplyBytes`): each route's bit, so that a route waiting for room is told when another
 * releases some (`awaitReplyRoom` / `releaseReplyRoom`), and not when it releases room itself.
 */
export const RoomParty = {
  /** The router (the rdma route): parks a client's calls while their replies would not fit. */
  RDMA: 1,
  /** The passthrough (tcp routes): holds the client's reading while its replies do not fit. */
  TCP: 2,
} as const;
