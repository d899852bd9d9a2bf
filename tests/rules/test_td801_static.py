"""TD801 sync-every-step, statically: a read that waits for the GPU at every training step; the
actions an environment needs to go on (reinforcement learning's acting step) are not deferrable."""

from __future__ import annotations

from helpers.snippets import check_rows

DQN = """
import torch

q_network = QNetwork(envs).to("cuda")
optimizer = torch.optim.Adam(q_network.parameters(), lr=1e-4)
obs, _ = envs.reset(seed=1)
for global_step in range(total_timesteps):
    with torch.no_grad():
        q_values = q_network(torch.Tensor(obs).to("cuda"))
        actions = torch.argmax(q_values, dim=1).cpu().numpy()
    next_obs, rewards, terminations, truncations, infos = envs.step({acting})
    obs = next_obs
    loss = td_loss(q_network, rb.sample(batch_size))
    {logging}
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_actions_handed_to_the_environment_are_not_a_deferrable_sync() -> None:
    assert check_rows(DQN.format(acting="actions", logging="pass"), ["TD801"]) == []
    direct = DQN.format(acting="torch.argmax(q_values, dim=1).cpu().numpy()", logging="pass").replace(
        "        actions = torch.argmax(q_values, dim=1).cpu().numpy()\n", ""
    )
    assert check_rows(direct, ["TD801"]) == []
    # a loss read every step for logging is still reported
    assert check_rows(DQN.format(acting="actions", logging="print(loss.item())"), ["TD801"]) == [("TD801", 14)]
