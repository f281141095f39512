/** Resolves with the name of the first SIGTERM or SIGINT (the drain starts there), removing the handlers. */
export function waitForStopSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const onTerm = () => done('SIGTERM');
    const onInt = () => done('SIGINT');
    const done = (signal: NodeJS.Signals) => {
      process.off('SIGTERM', onTerm);
      process.off('SIGINT', onInt);
      resolve(signal);
    };
    process.on('SIGTERM', onTerm);
    process.on('SIGINT', onInt);
  });
}
