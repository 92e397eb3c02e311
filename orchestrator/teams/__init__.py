"""Teams: a run's agents, by name, and the messages between them through the parent.

_roster   who is in the run's team, by name and id, and who may reach whom
_mail     messages: checked against reach and caps, enveloped, delivered, journaled
_tools    send_message and list_agents, for the main agent and granted sub-agents
"""
