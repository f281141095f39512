/**
 * Fault injection on the real soft device, for set-up failure paths that need a device out of a resource
 * (there is no RLIMIT_MEMLOCK to hit in userspace).
 */
import type { SoftCq } from '../../rdma-backend/providers/soft/cq.js';
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import type { SoftPd } from '../../rdma-backend/providers/soft/memory.js';
import { type Device, VerbsError } from '../../rdma-backend/verbs/index.js';

/**
 * A soft device whose `n`-th memory registration is refused as a device out of locked memory refuses it,
 * and which keeps every PD and CQ it made, so a test can see what a failed set-up left behind.
 */
export async function deviceRefusingRegistration(
  n: number,
): Promise<{ device: Device; pds: SoftPd[]; cqs: SoftCq[] }> {
  const device = await createSoftProvider().openDevice();
  const pds: SoftPd[] = [];
  const cqs: SoftCq[] = [];
  let registrations = 0;
  const allocPd = device.allocPd.bind(device);
  const createCq = device.createCq.bind(device);
  device.allocPd = () => {
    const pd = allocPd() as SoftPd;
    const register = pd.registerMemory.bind(pd);
    pd.registerMemory = (buffer, access) => {
      if (++registrations === n)
        throw new VerbsError('VERBS_RESOURCE_LIMIT', 'ibv_reg_mr: ENOMEM (RLIMIT_MEMLOCK)');
      return register(buffer, access);
    };
    pds.push(pd);
    return pd;
  };
  device.createCq = (depth) => {
    const cq = createCq(depth) as SoftCq;
    cqs.push(cq);
    return cq;
  };
  return { device, pds, cqs };
}
